package import NIOCore

/// Splits a byte stream into ``Frame``s, one step at a time.
///
/// The length field is checked against the limit as soon as the header is in, before any of
/// the value is buffered, so a peer announcing 4 GiB costs nothing. The first frame, which on a
/// link is the HELLO, has a limit of its own (``firstFrameMaximumLength``): a stranger's first
/// frame cannot make the link buffer a megabyte.
package struct FrameDecoder: NIOSingleStepByteToMessageDecoder {
    package typealias InboundOut = Frame

    /// The largest value accepted, in bytes.
    package let maximumLength: Int
    /// The largest value accepted in the first frame, in bytes.
    package let firstFrameMaximumLength: Int
    private var first = true

    package init(maximumLength: Int = Frame.defaultMaximumLength, firstFrameMaximumLength: Int? = nil) {
        precondition(maximumLength >= 0 && maximumLength <= Int(UInt32.max))
        self.maximumLength = maximumLength
        self.firstFrameMaximumLength = min(firstFrameMaximumLength ?? maximumLength, maximumLength)
    }

    package mutating func decode(buffer: inout ByteBuffer) throws -> Frame? {
        guard let (type, length) = buffer.getMultipleIntegers(at: buffer.readerIndex, as: (UInt32, UInt32).self) else {
            return nil
        }
        let limit = first ? firstFrameMaximumLength : maximumLength
        guard Int(length) <= limit else {
            throw MultipeerError(
                .frameTooLarge,
                "a \(FrameType(rawValue: type)) frame announced \(length) bytes, more than the limit of \(limit)"
                    + (first && limit < maximumLength ? " for a link's first frame" : "")
            )
        }
        guard buffer.readableBytes >= Frame.headerLength + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: Frame.headerLength)
        first = false
        let value = buffer.readSlice(length: Int(length))!
        return Frame(type: FrameType(rawValue: type), value: value)
    }

    package mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> Frame? {
        if let frame = try decode(buffer: &buffer) { return frame }
        if seenEOF && buffer.readableBytes > 0 {
            let pending = buffer.readableBytes
            buffer.moveReaderIndex(to: buffer.writerIndex)
            throw MultipeerError(
                .truncatedFrame,
                "the link closed in the middle of a frame (\(pending) bytes of it arrived)"
            )
        }
        return nil
    }
}
