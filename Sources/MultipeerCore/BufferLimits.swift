/// A bound on what a buffer may hold: at most so many messages and so many payload bytes,
/// whichever is reached first.
public struct BufferLimits: Sendable, Hashable {
    /// The most messages held.
    public var maximumCount: Int
    /// The most payload bytes held (as encoded on the wire).
    public var maximumBytes: Int

    /// A bound of `maximumCount` messages and `maximumBytes` bytes.
    public init(maximumCount: Int, maximumBytes: Int) {
        self.maximumCount = maximumCount
        self.maximumBytes = maximumBytes
    }
}
