import Instrumentation
import MultipeerCore
import Testing

@testable import MultipeerSession

/// What a message carries of the context it was sent in, with the process's instrument: nothing
/// without a context or without an instrument that writes it.
@Suite struct MessageTracingTests {
    enum TraceID: ServiceContextKey {
        typealias Value = String
    }

    /// Writes and reads one key, as a tracer writes `traceparent`.
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

    static func traced(_ id: String) -> ServiceContext {
        var context = ServiceContext.topLevel
        context[TraceID.self] = id
        return context
    }

    @Test func nothingIsCarriedWithoutAContextOrWithoutAnInstrumentThatWritesIt() {
        #expect(MessageTracing.carried(nil, by: Propagating()) == nil)
        #expect(MessageTracing.carried(Self.traced("t-1"), by: NoOpInstrument()) == nil, "no tracer bootstrapped")
        #expect(MessageTracing.carried(.topLevel, by: Propagating()) == nil, "a context the tracer writes nothing of")
        #expect(MessageTracing.context(of: nil, by: Propagating()) == nil)
    }

    @Test func whatTheInstrumentWritesTravelsAndIsReadBack() throws {
        let carried = try #require(MessageTracing.carried(Self.traced("t-1"), by: Propagating()))
        #expect(carried.entries == ["trace-id": "t-1"])
        #expect(MessageTracing.context(of: carried, by: Propagating())?[TraceID.self] == "t-1")
    }
}
