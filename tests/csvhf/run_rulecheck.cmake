# Runs one `rulecheck` command for an end-to-end test and compares its result.
#   cmake -DRULECHECK=... -DWORKDIR=... -DARGS="run;x.rules;--trace;t.csv" \
#         -DEXPECT_RC=1 -DEXPECT_OUT=file [-DEXPECT_ERR=regex]
#         [-DTRUNCATE_SRC=file -DTRUNCATE_BYTES=n] -P run_rulecheck.cmake
# With TRUNCATE_SRC, the first TRUNCATE_BYTES bytes of that file are copied to
# WORKDIR first (a damaged copy made at test time; the shipped file stays whole).
foreach(var RULECHECK WORKDIR ARGS EXPECT_RC EXPECT_OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_rulecheck.cmake: ${var} not set")
  endif()
endforeach()
if(DEFINED TRUNCATE_SRC)
  file(MAKE_DIRECTORY "${WORKDIR}")
  # Not file(READ ... LIMIT): CMake 3.25 returned one byte more than asked.
  file(READ "${TRUNCATE_SRC}" whole)
  string(SUBSTRING "${whole}" 0 ${TRUNCATE_BYTES} head)
  get_filename_component(name "${TRUNCATE_SRC}" NAME)
  file(WRITE "${WORKDIR}/${name}" "${head}")
endif()
execute_process(COMMAND "${RULECHECK}" ${ARGS}
  WORKING_DIRECTORY "${WORKDIR}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(READ "${EXPECT_OUT}" expected)
if(NOT rc STREQUAL EXPECT_RC)
  message(FATAL_ERROR "exit status ${rc}, expected ${EXPECT_RC}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(NOT out STREQUAL expected)
  message(FATAL_ERROR "stdout differs from ${EXPECT_OUT}\ngot:\n${out}\nexpected:\n${expected}")
endif()
if(DEFINED EXPECT_ERR AND NOT err MATCHES "${EXPECT_ERR}")
  message(FATAL_ERROR "stderr does not match '${EXPECT_ERR}':\n${err}")
endif()
