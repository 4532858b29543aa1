import CZlib

/// zlib streams (RFC 1950): how a versions message travels compressed (docs/SYNC.md 5, kind 7).
enum Zlib {
    /// The level the store compresses at: zlib's fastest. Versions' signatures (64 random bytes
    /// each) do not compress at any level, and the rest of a version compresses nearly as well
    /// at 1 as at 9, for a fifth of the time.
    static let level: Int32 = 1

    /// `bytes` as one zlib stream.
    static func compressed(_ bytes: [UInt8]) -> [UInt8] {
        var length = compressBound(uLong(bytes.count))
        var stream = [UInt8](repeating: 0, count: Int(length))
        let status = stream.withUnsafeMutableBufferPointer { stream in
            bytes.withUnsafeBufferPointer { source in
                compress2(stream.baseAddress, &length, source.baseAddress, uLong(source.count), level)
            }
        }
        // (compressBound is room enough for any input, and zlib takes any bytes: only a
        // failure to allocate its state fails, as an allocation in Swift would.)
        precondition(status == Z_OK, "zlib's compress2 failed (\(status))")
        stream.removeSubrange(Int(length)...)
        return stream
    }

    /// The `length` bytes (1 or more) `stream` inflates to: memory never more than `length`
    /// bytes, however far the stream would inflate.
    /// - Throws: `malformedMessage` if `stream` is not one whole zlib stream, has bytes
    ///   after its end, or inflates to more or fewer than `length` bytes.
    static func decompressed(_ stream: ArraySlice<UInt8>, length: Int) throws(SyncError) -> [UInt8] {
        precondition(length > 0, "a length the caller checked")
        guard !stream.isEmpty else { throw SyncError(.malformedMessage, "a compressed body without its zlib stream") }
        var bytes = [UInt8](repeating: 0, count: length)
        var (produced, consumed) = (uLongf(length), uLong(stream.count))
        let status = bytes.withUnsafeMutableBufferPointer { bytes in
            stream.withUnsafeBufferPointer { stream in
                uncompress2(bytes.baseAddress, &produced, stream.baseAddress, &consumed)
            }
        }
        switch status {
        case Z_OK where Int(produced) < length:
            throw SyncError(
                .malformedMessage,
                "a compressed body that inflates to \(produced) bytes, not the \(length) it declares"
            )
        case Z_OK where Int(consumed) < stream.count:
            throw SyncError(
                .malformedMessage,
                "\(stream.count - Int(consumed)) bytes after the compressed body's zlib stream"
            )
        case Z_OK:
            return bytes
        case Z_BUF_ERROR:
            throw SyncError(.malformedMessage, "a compressed body that inflates beyond the \(length) bytes it declares")
        default:
            throw SyncError(
                .malformedMessage,
                "a compressed body that is not one whole zlib stream (zlib: \(String(cString: zError(status))))"
            )
        }
    }
}
