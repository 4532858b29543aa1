/// Hexadecimal digits, as keys, signatures and hashes are written in files and on the wire:
/// lower case when written, either case when read.
package enum Hex {
    /// The lower-case digits of `bytes`.
    package static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var text: [UInt8] = []
        append(bytes, to: &text)
        return String(decoding: text, as: UTF8.self)
    }

    /// Appends the lower-case digits of `bytes` to `text`. For a secret, give `text` room for
    /// them first, so that growing it leaves no copy behind.
    package static func append(_ bytes: some Sequence<UInt8>, to text: inout [UInt8]) {
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0xF)])
        }
    }

    /// The bytes an even number of digits spell; nil if `text` is anything else. The digits
    /// are checked before any byte is made, so a refused secret leaves no part of it behind.
    package static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        guard text.count.isMultiple(of: 2), text.allSatisfy({ value(of: $0) != nil }) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.count / 2)
        var index = text.startIndex
        while index != text.endIndex {
            let high = value(of: text[index])!
            index = text.index(after: index)
            bytes.append(high << 4 | value(of: text[index])!)
            index = text.index(after: index)
        }
        return bytes
    }

    private static let digits = Array("0123456789abcdef".utf8)

    private static func value(of digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
