# docs/stdlib.md is exactly what `rulecheck stdlib --markdown` renders from the
# doc blocks of stdlib/*.rules; VIGIL_UPDATE_GOLDEN=1 in the environment rewrites it.
#   cmake -DRULECHECK=... -DDOC=.../docs/stdlib.md -P docs.cmake
cmake_minimum_required(VERSION 3.22)
execute_process(COMMAND ${RULECHECK} stdlib --markdown
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "rulecheck stdlib --markdown: exit status ${rc}\n${err}")
endif()
if(DEFINED ENV{VIGIL_UPDATE_GOLDEN})
  file(WRITE ${DOC} "${out}")
  return()
endif()
file(READ ${DOC} current)
if(NOT current STREQUAL out)
  message(FATAL_ERROR "docs/stdlib.md is stale: run VIGIL_UPDATE_GOLDEN=1 ctest -R stdlib.docs")
endif()
