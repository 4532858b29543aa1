import NIOConcurrencyHelpers
package import NIOCore

/// One `Value` for each event loop, made on first use and kept for as long as the process runs
/// (an event loop lives as long as its group, and this keeps the loop and a few hundred bytes per
/// loop ever used). The value is touched only on its loop. (Shell machinery, for the handlers
/// here and the session's: below them, the cores run no event loop.)
package final class PerEventLoop<Value: AnyObject>: Sendable {
    // NIOLockedValueBox (a pthread mutex), as everywhere in the package: ThreadSanitizer does
    // not see the futex of Synchronization's Mutex on Linux, and reports every access it guards
    // as a race (checked with a two-thread program built with -sanitize=thread).
    private let values = NIOLockedValueBox<[ObjectIdentifier: NIOLoopBound<Value>]>([:])
    private let make: @Sendable (any EventLoop) -> Value

    package init(_ make: @escaping @Sendable (any EventLoop) -> Value) {
        self.make = make
    }

    /// The value of `eventLoop`; call it on that loop.
    package func on(_ eventLoop: any EventLoop) -> Value {
        values.withLockedValue { values in
            let key = ObjectIdentifier(eventLoop)
            if let value = values[key] { return value.value }
            let value = make(eventLoop)
            values[key] = NIOLoopBound(value, eventLoop: eventLoop)
            return value
        }
    }
}
