from __future__ import annotations

import pytest

# pytest shows the values a failing assert compared only in the modules it rewrites: test
# modules, and the helpers named here before their first import.
pytest.register_assert_rewrite("tests.support")
