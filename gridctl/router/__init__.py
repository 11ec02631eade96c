"""The OpenAI-compatible router: route choice, upstream forwarding, telemetry taps."""
