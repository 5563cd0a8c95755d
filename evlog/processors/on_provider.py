"""evlog's span processors on an OpenTelemetry SDK tracer provider.

The consumers' processors (the default log: builtin.BuiltinLog; a MultiEventLog's dispatch) and the
console's marks are plain objects with a span processor's ``on_start(span, parent_context)`` and
``on_end(span)``, not subclasses of the SDK's SpanProcessor: a process whose program makes no span of its
own then imports no ``opentelemetry.sdk`` for them (they see the task spans recorded in this process
through the registry, evlog/processors/registry.py). On an SDK tracer provider each one is wrapped in a
SpanProcessor (the SDK's public extension point) that hands it every span; on evlog's own provider
(evlog.observed.sdk.LazyTracerProvider, which has ``when_built``) that happens once the provider is built,
when the program asks for its first tracer.
"""
from __future__ import annotations

_made: list = []  # the SpanProcessor subclass, made when the SDK is there


def takes_span_processors(provider) -> bool:
    """Is ``provider`` an SDK tracer provider, or evlog's (without building it)?"""
    return hasattr(provider, "when_built") or hasattr(provider, "add_span_processor")


def add_span_processor(provider, processor) -> None:
    """Add ``processor`` to ``provider``'s spans: now on an SDK provider, once built on evlog's."""
    when_built = getattr(provider, "when_built", None)
    if when_built is not None:
        when_built(lambda real: real.add_span_processor(on_sdk(processor)))
    else:
        provider.add_span_processor(on_sdk(processor))


def on_sdk(processor):
    """``processor`` as an SDK SpanProcessor."""
    if not _made:
        from opentelemetry.sdk.trace import SpanProcessor

        class OnSdk(SpanProcessor):
            """Hands every span start and end of an SDK provider to one of evlog's processors."""

            def __init__(self, inner):
                self.inner = inner

            def on_start(self, span, parent_context=None) -> None:
                self.inner.on_start(span, parent_context)

            def on_end(self, span) -> None:
                self.inner.on_end(span)

            def __repr__(self) -> str:
                return f"OnSdk({self.inner!r})"

        _made.append(OnSdk)
    return _made[0](processor)
