# The dependencies, each found once here; targets link the imported targets.
find_package(Threads REQUIRED)
find_package(Torch REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
# libmicrohttpd (Debian's libmicrohttpd-dev): the /metrics HTTP server (server/metrics_endpoint.h).
find_package(PkgConfig REQUIRED)
pkg_check_modules(MICROHTTPD REQUIRED IMPORTED_TARGET libmicrohttpd)
# The OpenAI-compatible HTTP door (server/rpc/openai/): Debian's cpp-httplib, built with OpenSSL.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
# hiredis (libhiredis-dev): the Redis session store; xxHash (libxxhash-dev): session snapshot
# checksums (server/sessions/).
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# PCRE2 (libpcre2-dev): tokenizer.json's Split patterns use lookahead, which RE2 and
# std::regex lack; utf8proc (libutf8proc-dev): Unicode normalization (NFC, NFKC) for the
# tokenizer (server/text/).
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
# OpenSSL (libssl-dev, which gRPC already needs): SHA-256 and constant-time comparison of
# bearer tokens (server/security/).
find_package(OpenSSL REQUIRED)

# Torch's config exports flags as variables; wrap them in one interface target so that only
# the targets that need torch see its headers and definitions.
add_library(attnserve_torch INTERFACE)
target_link_libraries(attnserve_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(attnserve_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(attnserve_torch INTERFACE ${_torch_flags})

find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
