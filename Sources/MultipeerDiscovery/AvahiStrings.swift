internal import CAvahi

/// Calls `body` with `entries` as an Avahi string list (a TXT record), freed afterwards.
func withAvahiStringList<T>(_ entries: [String], _ body: (UnsafeMutablePointer<AvahiStringList>?) -> T) -> T {
    var list: UnsafeMutablePointer<AvahiStringList>?
    // avahi_string_list_add_arbitrary prepends: add in reverse to keep the order.
    for entry in entries.reversed() {
        list = Array(entry.utf8).withUnsafeBufferPointer {
            avahi_string_list_add_arbitrary(list, $0.baseAddress, $0.count)
        }
    }
    defer { avahi_string_list_free(list) }
    return body(list)
}

/// The raw entries of an Avahi string list, in order.
func avahiStringListEntries(_ list: UnsafeMutablePointer<AvahiStringList>?) -> [[UInt8]] {
    var entries: [[UInt8]] = []
    var node = list
    while let current = node {
        let size = avahi_string_list_get_size(current)
        let text = avahi_string_list_get_text(current)
        entries.append(text.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
        node = avahi_string_list_get_next(current)
    }
    return entries
}

/// A Swift string from a C string that Avahi allocated, freeing it.
func takeAvahiString(_ pointer: UnsafeMutablePointer<CChar>?) -> String? {
    guard let pointer else { return nil }
    defer { avahi_free(pointer) }
    return String(cString: pointer)
}

/// Every interface, every protocol (Avahi's `*_UNSPEC`, which import as Int).
let avahiAnyInterface = AvahiIfIndex(AVAHI_IF_UNSPEC)
let avahiAnyProtocol = AvahiProtocol(AVAHI_PROTO_UNSPEC)
