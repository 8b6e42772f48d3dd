"""What mosearch searches: placement problems for RL post-training and benchmark problems."""
