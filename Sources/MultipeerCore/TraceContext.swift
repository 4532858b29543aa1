package import NIOCore

/// The trace context a message was sent in, as its sender's instrument wrote it (W3C's
/// `traceparent` and `tracestate`, say): carried in DATA_TRACED and FRAGMENT_TRACED
/// (docs/PROTOCOL.md 2c), only to a peer whose HELLO takes it.
package struct TraceContext: Hashable, Sendable {
    /// At most this many entries.
    package static let maximumEntries = 16

    /// The entries, each key 1 to 255 bytes of UTF-8 and each value at most 255.
    package private(set) var entries: [String: String]

    /// The entries that fit (a key of 1 to 255 bytes, a value of at most 255, the first
    /// ``maximumEntries`` keys in byte order); nil if none does.
    package init?(fitting entries: [String: String]) {
        let fitting = entries.filter { key, value in
            (1...255).contains(key.utf8.count) && value.utf8.count <= 255
        }
        guard !fitting.isEmpty else { return nil }
        let kept = fitting.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }.prefix(Self.maximumEntries)
        self.entries = fitting.filter { kept.contains($0.key) }
    }

    /// The bytes it takes at the start of a frame's value: a count, then each key and value.
    package var encodedLength: Int {
        1 + entries.reduce(0) { $0 + 2 + $1.key.utf8.count + $1.value.utf8.count }
    }

    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeMetadata(entries)
    }

    /// Reads a context at the start of a DATA_TRACED or FRAGMENT_TRACED value.
    package static func decode(from buffer: inout ByteBuffer, in type: FrameType) throws -> TraceContext {
        let entries = try buffer.readMetadata(in: type)
        guard (1...maximumEntries).contains(entries.count), entries.keys.allSatisfy({ !$0.isEmpty }) else {
            throw MultipeerError(
                .malformedMessage,
                "\(type) is malformed: its trace context has \(entries.count) entries (1 to \(maximumEntries), each with a key)"
            )
        }
        return TraceContext(entries: entries)
    }

    private init(entries: [String: String]) {
        self.entries = entries
    }
}
