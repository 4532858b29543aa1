import MultipeerCore

extension DataMessage {
    /// The whole message as fragments, in order, as a sender hands them out one at a time.
    func fragments(frameLimit: Int) -> [Fragment] {
        var fragments: [Fragment] = []
        var offset = 0
        while offset < payload.readableBytes {
            let fragment = fragment(from: offset, frameLimit: frameLimit)
            fragments.append(fragment)
            offset += fragment.bytes.readableBytes
        }
        return fragments
    }
}
