"""Rollout backends: vLLM (the real engine) and transformers `generate` (fast unit tests only).

Both expose the same methods, so the driver can host either in a Ray actor:
`generate(prompts, n, max_new_tokens, temperature, seed) -> RolloutResult dict`,
`update_weights(items, version)`, `sleep()`, `wake_up()`, `memory()`, `version`.
"""
