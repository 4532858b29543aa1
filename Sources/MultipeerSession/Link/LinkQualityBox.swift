import struct Foundation.UUID
import MultipeerCore
import NIOCore
import NIOConcurrencyHelpers

/// A link's quality, written on its event loop and read by the session from anywhere.
final class LinkQualityBox: Sendable {
    private let estimator = NIOLockedValueBox(LinkQualityEstimator())

    var quality: LinkQuality { estimator.withLockedValue { $0.quality } }

    @discardableResult
    func update<T>(_ body: (inout LinkQualityEstimator) -> T) -> T {
        estimator.withLockedValue { body(&$0) }
    }
}
