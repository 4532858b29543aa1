import Instrumentation
import MultipeerCore

/// A message's trace context (docs/PROTOCOL.md 2c), as swift-distributed-tracing propagates it:
/// a message sent inside a `ServiceContext` carries what the process's bootstrapped instrument
/// writes of it (W3C's `traceparent` and `tracestate` for an OpenTelemetry tracer), and the
/// receiver's instrument reads it back into the context its handler runs in
/// (``MultipeerSession/handleMessages(of:_:)``). With no context, or an instrument that writes
/// nothing (none bootstrapped: `NoOpTracer`), nothing is sent: the message goes as plain DATA.
enum MessageTracing {
    /// What the calling task's context becomes on the wire, as the process's instrument writes
    /// it; nil for nothing. The instrument is looked up only for a context: every message sent
    /// outside one (most) takes no lock for it (`InstrumentationSystem` keeps the instrument
    /// behind a read-write lock that every sending thread would share).
    static func carried() -> TraceContext? {
        guard let context = ServiceContext.current else { return nil }
        return carried(context, by: InstrumentationSystem.instrument)
    }

    /// What `context` becomes on the wire, as `instrument` writes it; nil for nothing.
    static func carried(_ context: ServiceContext?, by instrument: any Instrument) -> TraceContext? {
        guard let context else { return nil }
        var carrier: [String: String] = [:]
        instrument.inject(context, into: &carrier, using: Writer())
        // (Entries beyond the wire's limits are left out: a tracer's `tracestate` may be
        // shortened by dropping entries, W3C says.)
        return TraceContext(fitting: carrier)
    }

    /// The context `carried` brings, as the process's instrument reads it (looked up only for a
    /// message that carries one): the context a handler of the message runs in. Without one,
    /// none (a handler runs in its own task's).
    static func context(of carried: TraceContext?) -> ServiceContext? {
        guard let carried else { return nil }
        return context(of: carried, by: InstrumentationSystem.instrument)
    }

    /// The context `carried` brings, as `instrument` reads it.
    static func context(of carried: TraceContext?, by instrument: any Instrument) -> ServiceContext? {
        guard let carried else { return nil }
        var context = ServiceContext.topLevel
        instrument.extract(carried.entries, into: &context, using: Reader())
        return context
    }

    private struct Writer: Injector {
        func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) {
            carrier[key] = value
        }
    }

    private struct Reader: Extractor {
        func extract(key: String, from carrier: [String: String]) -> String? {
            carrier[key]
        }
    }
}
