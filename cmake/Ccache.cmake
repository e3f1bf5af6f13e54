# Uses ccache when it is installed (setup installs it; its cache in the home directory
# survives between builds). The precompiled header needs ccache's pch sloppiness.
find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(_launcher ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      # Paths relative to the checkout, so that a fresh clone elsewhere (CI) hits the cache.
      "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" "CCACHE_NOHASHDIR=1"
      ${CCACHE_PROGRAM})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_launcher})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${_launcher})
  message(STATUS "ccache: ${CCACHE_PROGRAM}")
endif()
