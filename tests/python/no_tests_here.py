"""Collects no test on purpose: ctest's python_no_tests_is_a_failure runs pytest
on this file and expects it to fail (pytest's exit status 5), which is what
makes an emptied suite fail `make test` instead of passing silently."""
