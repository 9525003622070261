"""The one asyncio/anyio driver layer that the relay and both SDKs share."""
