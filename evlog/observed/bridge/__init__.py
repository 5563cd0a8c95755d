"""The torchelastic events bridge's OTel side (the public API is evlog.bridge): events -> log records, metrics."""
