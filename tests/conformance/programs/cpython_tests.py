# CPython's own tests of the process machinery (the Debian package libpython3.11-testsuite),
# run with unittest and reported one line per case: "<test id> <outcome>", sorted, nothing else
# on stdout. The conformance suite runs this alone and under adprof and compares the lines: a
# case that passes alone must pass under the profiler (cpython_tests_test.cpp).
#
# usage: cpython_tests.py MODULE[:PATTERN,...] ...
#   MODULE:  a module of the `test` package (test_faulthandler)
#   PATTERN: run only the cases whose id contains one of these strings; -PATTERN: none whose
#            id contains it
import io
import sys
import unittest


def cases(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from cases(item)
        else:
            yield item


class Outcomes(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.outcome = {}

    def addSuccess(self, test):
        self.outcome[test.id()] = "ok"

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcome[test.id()] = "FAIL"

    def addError(self, test, err):
        super().addError(test, err)
        self.outcome[test.id()] = "ERROR"

    def addSkip(self, test, reason):
        self.outcome[test.id()] = "skipped"

    def addExpectedFailure(self, test, err):
        self.outcome[test.id()] = "expected-failure"

    def addUnexpectedSuccess(self, test):
        self.outcome[test.id()] = "unexpected-success"


def main(args):
    suite = unittest.TestSuite()
    for arg in args:
        module, _, patterns = arg.partition(":")
        loaded = unittest.defaultTestLoader.loadTestsFromName("test." + module)
        wanted = [p for p in patterns.split(",") if p and not p.startswith("-")]
        unwanted = [p[1:] for p in patterns.split(",") if p.startswith("-")]
        for case in cases(loaded):
            if (not wanted or any(p in case.id() for p in wanted)) and not any(
                p in case.id() for p in unwanted
            ):
                suite.addTest(case)
    result = Outcomes()
    # The cases print progress and warnings of their own: kept off stdout, which is the report.
    stdout, sys.stdout = sys.stdout, io.StringIO()
    try:
        suite.run(result)
    finally:
        sys.stdout = stdout
    for test_id in sorted(result.outcome):
        print(test_id, result.outcome[test_id])
    for test, trace in result.failures + result.errors:
        print(f"--- {test.id()}\n{trace}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
