"""Django's test runner, also writing each test's outcome to the JSON file named by
SHOAL_DJANGO_OUTCOMES: `{"Class.test": "passed" | "failed" | "error" | "skipped" | ...}`,
what test_django_suite.py compares between memcached and Shoal."""

import json
import os
import re
import unittest

from django.test.runner import DiscoverRunner


def name_of(test):
    """`Class.test_method`; for a class or module set-up that failed (unittest reports an
    `_ErrorHolder` such as "setUpClass (cache.tests.PyLibMCCacheTests)"), `Class.setUpClass`."""
    if isinstance(test, unittest.TestCase):
        return f"{type(test).__name__}.{test._testMethodName}"
    match = re.fullmatch(r"(\w+) \((?:[\w.]*\.)?(\w+)\)", str(test))
    return f"{match[2]}.{match[1]}" if match else str(test)


class OutcomeResult(unittest.TextTestResult):
    """A text result that also keeps each test's outcome; a failed subtest fails its test."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}

    def record(self, test, outcome):
        # A test reports each subtest that failed, then perhaps an outcome of its own: a
        # failure stands.
        if self.outcomes.get(name_of(test)) not in ("failed", "error"):
            self.outcomes[name_of(test)] = outcome

    def addSuccess(self, test):
        super().addSuccess(test)
        self.record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.record(test, "failed")

    def addError(self, test, err):
        super().addError(test, err)
        self.record(test, "error")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.record(test, "skipped")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.record(test, "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.record(test, "unexpected success")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.record(test, "failed" if issubclass(err[0], self.failureException) else "error")


class OutcomeRunner(DiscoverRunner):
    def get_resultclass(self):
        return OutcomeResult

    def run_suite(self, suite, **kwargs):
        result = super().run_suite(suite, **kwargs)
        with open(os.environ["SHOAL_DJANGO_OUTCOMES"], "w") as out:
            json.dump(result.outcomes, out, indent=1, sort_keys=True)
        return result
