import Foundation
import Instrumentation
import MultipeerSession
import Testing

/// A message sent inside a trace is handled inside it on the receiver, as swift-distributed-
/// tracing propagates a request's context: the application bootstraps its instrument (here one
/// that carries a trace ID, as an OpenTelemetry tracer carries `traceparent`), sends inside a
/// `ServiceContext`, and reads with `handleMessages(of:_:)`.
@Suite struct TracingTests {
    enum TraceID: ServiceContextKey {
        typealias Value = String
    }

    /// Writes the trace ID under `trace-id` and reads it back.
    struct Propagating: Instrument {
        func inject<Carrier, Inject: Injector>(
            _ context: ServiceContext,
            into carrier: inout Carrier,
            using injector: Inject
        ) where Inject.Carrier == Carrier {
            if let id = context[TraceID.self] { injector.inject(id, forKey: "trace-id", into: &carrier) }
        }

        func extract<Carrier, Extract: Extractor>(
            _ carrier: Carrier,
            into context: inout ServiceContext,
            using extractor: Extract
        ) where Extract.Carrier == Carrier {
            context[TraceID.self] = extractor.extract(key: "trace-id", from: carrier)
        }
    }

    /// The process's instrument: bootstrapped once (swift-distributed-tracing allows no second),
    /// by the first test that needs it. Other tests send outside any context: nothing changes for them.
    static let bootstrapped: Void = InstrumentationSystem.bootstrap(Propagating())

    static func traced(_ id: String) -> ServiceContext {
        var context = ServiceContext.topLevel
        context[TraceID.self] = id
        return context
    }

    @Test func aMessageSentInsideATraceIsHandledInsideIt() async throws {
        _ = Self.bootstrapped
        try await withPair { listener, dialler in
            // What the handler saw: each note's text and the trace ID of the context it ran in.
            // (A message that arrives before the handler subscribes is held for it, context and all.)
            let (handled, saw) = AsyncStream.makeStream(of: (text: String, id: String?).self)
            let handling = Task {
                await listener.handleMessages(of: Note.self) { _, note in
                    saw.yield((note.text, ServiceContext.current?[TraceID.self]))
                }
            }
            defer { handling.cancel() }
            try await ServiceContext.withValue(Self.traced("t-1")) {
                try await dialler.send(Note(text: "in a trace"), to: listener.peerID)
            }
            try await dialler.send(Note(text: "outside"), to: listener.peerID)
            // Larger than a fragment (256 KiB): every fragment carries the context.
            let large = String(repeating: "x", count: 600 << 10)
            try await ServiceContext.withValue(Self.traced("t-2")) {
                try await dialler.send(Note(text: large), to: listener.peerID)
            }
            let seen = try await within(30, "the three notes handled") { () -> [String: String] in
                var seen: [String: String] = [:]
                for await (text, id) in handled {
                    seen[text] = id ?? "none"
                    if seen.count == 3 { break }
                }
                return seen
            }
            #expect(seen["in a trace"] == "t-1")
            #expect(seen["outside"] == "none")
            #expect(seen[large] == "t-2")
        }
    }
}
