"""The backend conformance suite, split by the semantics each module checks.

Import it through :mod:`blamequeue_testing.conformance`; these modules are private.
"""
