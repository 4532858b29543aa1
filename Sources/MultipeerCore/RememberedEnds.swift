/// How the latest transfers or streams ended, by key, so that a peer who did not hear the end
/// (it went with a link) is told it again rather than the thing begun anew: the `capacity` most
/// recent ends, a key's latest end replacing its earlier one, the oldest forgotten first. At
/// most `capacity` entries, whatever a peer sends.
package struct RememberedEnds<Key: Hashable & Sendable, End: Sendable>: Sendable {
    /// The most ends remembered.
    package let capacity: Int
    /// The ends, oldest first.
    private var ends: [(key: Key, end: End)] = []

    package init(capacity: Int) {
        precondition(capacity > 0, "RememberedEnds keeps at least one end")
        self.capacity = capacity
    }

    /// `key` ended as `end`: remembered as its latest, the oldest end forgotten beyond
    /// ``capacity``.
    package mutating func remember(_ key: Key, _ end: End) {
        ends.removeAll { $0.key == key }
        ends.append((key, end))
        if ends.count > capacity { ends.removeFirst() }
    }

    /// How `key` ended, if that is still remembered.
    package subscript(key: Key) -> End? {
        ends.last { $0.key == key }?.end
    }

    /// How many ends are remembered.
    package var count: Int { ends.count }
}
