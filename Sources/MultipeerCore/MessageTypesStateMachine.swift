/// Which message types a session's application reads, and what the session does with a message
/// of a type nothing subscribes to now (docs/PROTOCOL.md 3b, 3e). One rule, with or without a
/// declaration:
///
/// - A type the application reads (it declared it, or subscribed to it once: once read, a type
///   stays read) is held for its first subscriber, and a full hold stops the links that fill it,
///   as a full stream does: nothing of a type read is refused.
/// - A type it does not declare, in a session that declared its types, is refused: it is not read.
/// - In a session that declared nothing, any other type is on trial: held for a first subscriber
///   (a program starting) while its hold has room, and while fewer than the most names are held;
///   the first message beyond is refused, and the type with it, until the application
///   subscribes to it. A type on trial never stops a link.
///
/// A refused message counts as delivered (its ACK covers it) and its sender is told (REJECT);
/// what the session reads is told to its peers (HELLO, then TYPES as it changes: ``reads``), so
/// that those that keep to it send no refused type at all.
package struct MessageTypesStateMachine: Sendable {
    /// Whether the application listed what it reads: a type off the list is not read.
    private var declared: MessageTypeList?
    /// The types the application reads: declared, or subscribed to.
    private var read: Set<String>
    /// In a session that declared nothing: the types refused since nothing subscribed to them,
    /// as many as a list takes (those beyond are refused all the same, and not announced).
    private var refused = MessageTypeList.empty

    /// - Parameter declared: The types the application declared it reads; nil: it declared none.
    package init(declared: MessageTypeList?) {
        self.declared = declared
        self.read = declared?.names ?? []
    }

    /// What the session tells its peers it reads: its list, if it declared one, else every type
    /// but those it refused.
    package var reads: MessageTypesRead {
        declared.map(MessageTypesRead.only) ?? .allBut(refused)
    }

    /// What becomes of a message of a type nothing subscribes to now.
    package enum Verdict: Equatable, Sendable {
        /// Held for the first subscriber; `stopsWhenFull`: a full hold stops the link that
        /// filled it (a type read), else the hold takes no more than its bound (a type on trial).
        case hold(stopsWhenFull: Bool)
        /// Refused (acknowledged, then REJECT with `reason`); `announce`: what the session reads
        /// changed, and its peers are to be told.
        case refuse(reason: String, announce: Bool)
    }

    /// The hold of a type, as the session keeps it.
    package enum Hold: Equatable, Sendable {
        /// Nothing of the type is held; messages of `heldNames` other names are.
        case none(heldNames: Int)
        /// `count` messages of the type are held; `isFull`: the hold is at its bound.
        case holding(count: Int, isFull: Bool)
    }

    /// A message of `typeName` came, and nothing subscribes to the type: whether it is held or
    /// refused. `hold` is the type's hold; at most `maximumHeldNames` names are held of types
    /// on trial.
    package mutating func unsubscribed(_ typeName: String, hold: Hold, maximumHeldNames: Int) -> Verdict {
        if read.contains(typeName) { return .hold(stopsWhenFull: true) }
        if let declared {
            return .refuse(
                reason:
                    "this peer does not read messages of type \"\(typeName)\" (it reads: \(declared.description.prefix(160))); it runs another build of the application",
                announce: false
            )
        }
        let beyond: String
        switch hold {
        case _ where refused.contains(typeName):
            beyond = "it refused them since it held as many as it holds for a first subscriber"
        case .holding(let count, isFull: true):
            beyond = "it held the first \(count) for a first subscriber, as many as it holds"
        case .none(let heldNames) where heldNames >= maximumHeldNames:
            beyond = "it holds messages of \(heldNames) other types for a first subscriber, as many types as it holds"
        case .none, .holding:
            return .hold(stopsWhenFull: false)
        }
        let before = refused
        refused = (try? refused.adding(typeName)) ?? refused
        return .refuse(
            reason:
                "this peer does not read messages of type \"\(typeName)\": nothing there subscribes to it, and \(beyond); it may run another build of the application",
            announce: refused != before
        )
    }

    /// The application subscribed to `typeName`: it reads the type from now on. Returns whether
    /// what the session reads changed (its peers are to be told).
    package mutating func subscribed(_ typeName: String) -> Bool {
        let before = reads
        read.insert(typeName)
        if let list = declared {
            // Past what a list takes, the session reads as one that declared nothing.
            declared = try? list.adding(typeName)
        }
        refused = refused.removing(typeName)
        return reads != before
    }
}
