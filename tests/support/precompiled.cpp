// The test drivers' precompiled headers are built with this file (tests/CMakeLists.txt,
// adprof_test_pch): the program itself does nothing and is never run.
