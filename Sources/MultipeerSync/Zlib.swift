import CZlib

/// zlib streams (RFC 1950): how a versions message travels compressed (docs/SYNC.md 5, kind 7).
package enum Zlib {
    /// The level the store compresses at: zlib's fastest. Versions' signatures (64 random bytes
    /// each) do not compress at any level, and the rest of a version compresses nearly as well
    /// at 1 as at 9, for a fifth of the time.
    static let level: Int32 = 1

    /// A compressor, set up once and reset for each message: setting one up (about 256 KiB of
    /// state) costs more than compressing a message of a few KiB. Its owner's alone.
    package final class Compressor {
        /// zlib keeps the stream's address in its state, so the stream lives at one address of
        /// its own for the compressor's life (an `&` of a stored property may be a temporary).
        private let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)

        package init() {
            stream.initialize(to: z_stream())
            let status = deflateInit2_(
                stream,
                Zlib.level,
                Z_DEFLATED,
                15,  // (a 32 KiB window, and a zlib header and trailer: RFC 1950)
                8,
                Z_DEFAULT_STRATEGY,
                ZLIB_VERSION,
                Int32(MemoryLayout<z_stream>.size)
            )
            // (Only a failure to allocate its state fails, as an allocation in Swift would.)
            precondition(status == Z_OK, "zlib's deflateInit2 failed (\(status))")
        }

        deinit {
            deflateEnd(stream)
            stream.deinitialize(count: 1)
            stream.deallocate()
        }

        /// `bytes` as one zlib stream.
        package func compressed(_ bytes: [UInt8]) -> [UInt8] {
            deflateReset(stream)
            let bound = Int(deflateBound(stream, uLong(bytes.count)))
            return [UInt8](unsafeUninitializedCapacity: bound) { output, count in
                bytes.withUnsafeBufferPointer { input in
                    stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
                    stream.pointee.avail_in = uInt(input.count)
                    stream.pointee.next_out = output.baseAddress
                    stream.pointee.avail_out = uInt(output.count)
                    // (deflateBound is room enough for one call to finish any input.)
                    let status = deflate(stream, Z_FINISH)
                    precondition(status == Z_STREAM_END, "zlib's deflate did not finish (\(status))")
                }
                count = Int(stream.pointee.total_out)
                (stream.pointee.next_in, stream.pointee.next_out) = (nil, nil)
            }
        }
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
