internal import CAvahi
import MultipeerCore

/// A DNS-SD service type such as `_navlog._tcp`: the name of the group's private network.
package struct ServiceType: Hashable, Sendable, CustomStringConvertible {
    package let rawValue: String

    /// Checks `rawValue` is a valid DNS-SD service type (`_name._tcp`).
    package init(_ rawValue: String) throws {
        guard rawValue.hasSuffix("._tcp"), avahi_is_valid_service_type_strict(rawValue) != 0 else {
            throw MultipeerError(
                .invalidArgument,
                "\"\(rawValue)\" is not a DNS-SD service type for TCP: use _name._tcp, the name at most 15 letters, digits and hyphens"
            )
        }
        self.rawValue = rawValue
    }

    package var description: String { rawValue }
}
