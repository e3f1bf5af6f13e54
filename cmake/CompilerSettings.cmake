# Warnings and sanitizers for attnserve's own targets (not for generated code).
function(attnserve_target_settings target)
  # -Wno-psabi: the vector kernels pass 64-byte vectors between inlined helpers; GCC notes
  # an ABI change from GCC 4.6 that concerns no interface of ours.
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-psabi>)
endfunction()

if(ATTNSERVE_SANITIZE)
  if(NOT ATTNSERVE_SANITIZE MATCHES "^(address|undefined)$")
    message(FATAL_ERROR "ATTNSERVE_SANITIZE must be address or undefined, got '${ATTNSERVE_SANITIZE}'")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${ATTNSERVE_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${ATTNSERVE_SANITIZE})
endif()

# The precompiled header that every torch-facing target shares: ATen only, never torch.h.
function(attnserve_precompile_aten target)
  target_precompile_headers(${target} PRIVATE <ATen/ATen.h> <absl/status/statusor.h>)
endfunction()
