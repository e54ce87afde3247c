"""How many examples a property draws: hypothesis' profiles for the tests, and `examples` for a test that asks for
its own count (an explicit ``max_examples`` overrides the loaded profile, so it is scaled here instead).

``HYPOTHESIS_PROFILE=thorough`` multiplies every count by 12: 300 examples where the default draws 25.
"""

import os

from hypothesis import HealthCheck, settings

DEFAULT_EXAMPLES = 25
THOROUGH_FACTOR = 12
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")


def examples(count: int) -> int:
    """``count`` examples under the default profile, ``THOROUGH_FACTOR`` times as many under ``thorough``."""
    return count * THOROUGH_FACTOR if PROFILE == "thorough" else count


# Models are built per example, so generation is slow next to hypothesis' defaults.
settings.register_profile(
    "default",
    max_examples=DEFAULT_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", parent=settings.get_profile("default"), max_examples=DEFAULT_EXAMPLES * THOROUGH_FACTOR
)
settings.load_profile(PROFILE)
