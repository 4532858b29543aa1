import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

import struct Foundation.UUID

/// A link's quality, written on its event loop and read by the session from anywhere.
final class LinkQualityBox: Sendable {
    private let estimator = NIOLockedValueBox(LinkQualityEstimator())

    var quality: LinkQuality { estimator.withLockedValue { $0.quality } }

    @discardableResult
    func update<T>(_ body: (inout LinkQualityEstimator) -> T) -> T {
        estimator.withLockedValue { body(&$0) }
    }
}
