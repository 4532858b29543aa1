package import NIOCore

/// The messages of one type name held for its first subscriber, without I/O (the session keeps
/// one per name that nothing subscribes to yet, as ``MessageTypesStateMachine`` decides): bounded
/// as a stream is, by a count and bytes (one message alone is never too large), and full from its
/// first message when its name is one more than the names that may be held. A hold of a type the
/// application reads stops the links that fill it and keeps their calls for room, for the first
/// subscriber to make; one of a type on trial never stops them (what comes beyond it is refused).
package struct MessageHold<Message: Sendable>: Sendable {
    /// What the application hears of a hold.
    package enum Report: Equatable, Sendable {
        /// The first message of the name was held (once per hold).
        case held
        /// The hold became full and stops its links (once each time it fills).
        case full
    }

    /// What is held, oldest first.
    package private(set) var messages = CircularBuffer<Message>()
    /// Their bytes, as ``hold(_:cost:stopsWhenFull:hold:limits:whenRoom:)`` counted them.
    package private(set) var bytes = 0
    /// Of a type read, held beyond `maximumHeldNames` names: full from its first message.
    private var beyondTypeLimit = false
    /// The links a full hold stopped (their readers' calls for room).
    private var stopped: [@Sendable () -> Void] = []
    private var reportedHeld = false

    package init() {}

    package var isEmpty: Bool { messages.isEmpty }

    /// At `limits` (one message alone is never too large), or a name beyond the names' limit.
    package func isFull(_ limits: BufferLimits) -> Bool {
        beyondTypeLimit || messages.count >= limits.maximumCount
            || (bytes >= limits.maximumBytes && messages.count > 1)
    }

    /// Holds `message`, of `cost` bytes. `stopsWhenFull`: the type is read (the verdict's); `hold`:
    /// the holds as they were when the verdict was made (``MessageTypesStateMachine/Hold``);
    /// `maximumHeldNames` the names that may be held. Returns whether the hold is full now and
    /// stops the link (whose `whenRoom` it keeps), and what to report.
    package mutating func hold(
        _ message: Message,
        cost: Int,
        stopsWhenFull: Bool,
        hold: MessageTypesStateMachine.Hold,
        limits: BufferLimits,
        maximumHeldNames: Int,
        whenRoom: @escaping @Sendable () -> Void
    ) -> (full: Bool, reports: [Report]) {
        let wasFull = isFull(limits)
        if stopsWhenFull, case .none(let heldNames) = hold {
            // One name more than may be held: held all the same (never dropped: the ACK for it
            // may be on its way), and full at once, so the link stops until a subscriber comes.
            // Each link brings at most one such message.
            beyondTypeLimit = heldNames >= maximumHeldNames
        }
        messages.append(message)
        bytes += cost
        var reports: [Report] = []
        if !reportedHeld {
            reportedHeld = true
            reports.append(.held)
        }
        let full = stopsWhenFull && isFull(limits)
        if full {
            stopped.append(whenRoom)
            if !wasFull { reports.append(.full) }
        }
        return (full, reports)
    }

    /// The first subscriber takes what is held, oldest first, and the calls for room of the
    /// links the hold stopped (they read again once its stream has room); the hold is empty.
    package mutating func take() -> (messages: CircularBuffer<Message>, stopped: [@Sendable () -> Void]) {
        defer {
            messages = []
            bytes = 0
            beyondTypeLimit = false
            stopped = []
        }
        return (messages, stopped)
    }
}
