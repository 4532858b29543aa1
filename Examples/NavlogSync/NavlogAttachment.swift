/// A file attached to an entry (docs/NAVLOG.md 1a): its name, length and SHA-256, which the
/// entry's version carries and its origin signs. The file's bytes travel apart, as a resource of
/// the session (docs/PROTOCOL.md 3c), from any host that holds them: the hash in the signed
/// version checks them, whoever relayed them.
public struct NavlogAttachment: Hashable, Sendable, Codable {
    /// The file's name: 1 to 255 bytes of UTF-8, no control character or `/`, not `.` or `..`.
    public var name: String
    /// Its length in bytes.
    public var length: Int64
    /// The SHA-256 of its bytes, 64 lowercase hexadecimal digits.
    public var sha256: String

    public init(name: String, length: Int64, sha256: String) {
        self.name = name
        self.length = length
        self.sha256 = sha256
    }

    /// Decodes an attachment as a peer sent it. A length that is a number but no `Int64` (2^63
    /// or more, or not whole) is read as ``lengthOutOfRange``, so that its version is refused
    /// alone (`badVersion`) while the rest of the message it came in is taken: a decoding error
    /// would drop the whole message, up to a batch of 500 versions.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        sha256 = try container.decode(String.self, forKey: .sha256)
        if let length = try? container.decode(Int64.self, forKey: .length) {
            self.length = length
        } else if (try? container.decode(Double.self, forKey: .length)) != nil {
            length = Self.lengthOutOfRange
        } else {
            length = try container.decode(Int64.self, forKey: .length)  // (not a number: the decoder's error)
        }
    }

    /// What a length beyond `Int64` reads as: a negative length, which no version may carry.
    static let lengthOutOfRange = Int64.min

    /// The most attachments a version carries.
    public static let maximumPerVersion = 16

    /// What a name must be, for hosts to take a version carrying it.
    public static let nameRule = "1 to 255 bytes of UTF-8 without a control character or '/', and not \".\" or \"..\""

    /// Whether `name` may name an attachment (``nameRule``): it becomes a file's name.
    public static func isName(_ name: String) -> Bool {
        (1...255).contains(name.utf8.count) && name != "." && name != ".." && !name.contains("/")
            && !name.unicodeScalars.contains(where: \.isControl)
    }

    /// Checks a version's attachments as hosts do before taking it in: at most
    /// ``maximumPerVersion``, sorted by name (byte order), each name once and valid, each hash
    /// 64 lowercase hexadecimal digits, each length not negative; an empty list is left out.
    static func validate(_ attachments: [NavlogAttachment]?) throws(NavlogError) {
        guard let attachments else { return }
        guard !attachments.isEmpty else {
            throw NavlogError(.badVersion, "its attachments are an empty list, which is left out")
        }
        guard attachments.count <= maximumPerVersion else {
            throw NavlogError(
                .badVersion,
                "it carries \(attachments.count) attachments, more than \(maximumPerVersion)"
            )
        }
        for (index, attachment) in attachments.enumerated() {
            guard isName(attachment.name) else {
                throw NavlogError(.badVersion, "an attachment's name is not \(nameRule)")
            }
            guard attachment.length >= 0 else {
                throw NavlogError(.badVersion, "attachment \(attachment.name) has a length below 0 or above 2^63 - 1")
            }
            guard attachment.sha256.utf8.count == 64,
                attachment.sha256.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) })
            else {
                throw NavlogError(
                    .badVersion,
                    "the SHA-256 of attachment \(attachment.name) is not 64 lowercase hexadecimal digits"
                )
            }
            if index > 0, !attachments[index - 1].name.utf8.lexicographicallyPrecedes(attachment.name.utf8) {
                throw NavlogError(.badVersion, "its attachments are not sorted by name, each once (\(attachment.name))")
            }
        }
    }
}

extension [NavlogAttachment] {
    /// These attachments with `attachment` added, replacing one of the same name, sorted by name.
    func adding(_ attachment: NavlogAttachment) -> [NavlogAttachment] {
        (filter { $0.name != attachment.name } + [attachment]).sorted {
            $0.name.utf8.lexicographicallyPrecedes($1.name.utf8)
        }
    }
}
