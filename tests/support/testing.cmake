# Helpers for registering tests, included by tests/CMakeLists.txt before the
# test folders.

set(VIGIL_RUN_AND_MATCH ${CMAKE_CURRENT_LIST_DIR}/run_and_match.cmake)

# vigil_add_matching_test(NAME [EXIT_CODE N] [PASS regex] [FAIL regex]
#                         [WORKING_DIRECTORY dir] COMMAND cmd args...)
# A test that passes only when COMMAND exits with EXIT_CODE (default 0) and its
# output matches PASS and not FAIL (see run_and_match.cmake): use it instead of
# PASS_REGULAR_EXPRESSION, which makes ctest ignore the exit status.
function(vigil_add_matching_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "EXIT_CODE;PASS;FAIL;WORKING_DIRECTORY" "COMMAND")
  set(defines "")
  foreach(key EXIT_CODE PASS FAIL)
    if(DEFINED arg_${key})
      list(APPEND defines "-D${key}=${arg_${key}}")
    endif()
  endforeach()
  if(NOT arg_WORKING_DIRECTORY)
    set(arg_WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} ${defines} -P ${VIGIL_RUN_AND_MATCH} -- ${arg_COMMAND}
           WORKING_DIRECTORY ${arg_WORKING_DIRECTORY})
endfunction()
