"""mosearch: many-objective placement search for RL post-training on mixed GPU clusters."""

__version__ = "0.1.0"
