import MultipeerCore
import NIOCore

@testable import MultipeerSession

extension LinkHandle {
    /// `channel` as the link `id` a peer that sent `hello` is reached on, with a writer of its own.
    init(id: LinkID, channel: any Channel, hello: Hello) {
        self.init(
            id: id,
            channel: channel,
            writer: LinkWriter(id: id, channel: channel, offload: globalConcurrentExecutor),
            hello: hello,
            quality: LinkQualityBox()
        )
    }
}
