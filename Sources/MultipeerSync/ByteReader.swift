/// Reads bytes from a peer in order, each read naming what it reads, so a refusal says where the
/// bytes broke the spec: as `code` ("a version ...", "a message ...", after `subject`).
struct ByteReader {
    let bytes: [UInt8]
    let code: SyncError.Code
    let subject: String
    var offset = 0

    init(_ bytes: [UInt8], refusing code: SyncError.Code, as subject: String) {
        self.bytes = bytes
        self.code = code
        self.subject = subject
    }

    var isAtEnd: Bool { offset == bytes.count }

    func refusal(_ what: String) -> SyncError {
        SyncError(code, what)
    }

    mutating func bytes(_ count: Int, _ what: String) throws(SyncError) -> ArraySlice<UInt8> {
        guard count <= bytes.count - offset else {
            throw refusal("\(subject) ends inside its \(what), at byte \(bytes.count)")
        }
        defer { offset += count }
        return bytes[offset..<offset + count]
    }

    /// Every byte left.
    mutating func rest() -> ArraySlice<UInt8> {
        defer { offset = bytes.count }
        return bytes[offset...]
    }

    mutating func byte(_ what: String) throws(SyncError) -> UInt8 {
        try bytes(1, what).first!
    }

    mutating func integer<T: FixedWidthInteger>(_ type: T.Type, _ what: String) throws(SyncError) -> T {
        try bytes(MemoryLayout<T>.size, what).reduce(0) { $0 << 8 | T($1) }
    }

    /// A varint in its one form: no leading zero digit, at most 64 bits.
    mutating func varint(_ what: String) throws(SyncError) -> UInt64 {
        var value: UInt64 = 0
        for position in 0..<10 {
            let digit = try byte(what)
            guard position > 0 || digit != 0x80 else {
                throw refusal("a \(what) whose varint begins with a zero digit")
            }
            guard value >> 57 == 0 else { throw refusal("a \(what) beyond 64 bits") }
            value = value << 7 | UInt64(digit & 0x7f)
            if digit & 0x80 == 0 { return value }
        }
        throw refusal("a \(what) beyond 64 bits")
    }

    /// `length` bytes of UTF-8, the length within `range`.
    mutating func text(length: Int, in range: ClosedRange<Int>, _ what: String) throws(SyncError) -> String {
        guard range.contains(length) else {
            throw refusal("\(subject)'s \(what) of \(length) bytes: \(range.lowerBound) to \(range.upperBound)")
        }
        return try text(try bytes(length, what), what)
    }

    func text(_ bytes: ArraySlice<UInt8>, _ what: String) throws(SyncError) -> String {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw refusal("\(subject)'s \(what) is not UTF-8")
        }
        return text
    }
}
