public import MultipeerSync

/// A file attached to an entry (docs/NAVLOG.md 1a): its name, length and SHA-256, which the
/// entry's version carries and its origin signs. The file's bytes travel apart, as the store's
/// attachments (docs/SYNC.md 9), from any host that holds them: the hash in the signed version
/// checks them, whoever relayed them. Encoded as `{"name", "length", "sha256"}`.
public struct NavlogAttachment: Hashable, Sendable, Codable {
    /// The file's name: 1 to 255 bytes of UTF-8, no control character or `/`, not `.` or `..`.
    public var name: String
    /// The file, as the store names it (its SHA-256 and length).
    public var file: SyncAttachment

    public init(name: String, file: SyncAttachment) {
        self.name = name
        self.file = file
    }

    /// Its length in bytes.
    public var length: Int64 { file.length }
    /// The SHA-256 of its bytes, 64 lowercase hexadecimal digits.
    public var sha256: String { file.hex }

    private enum CodingKeys: String, CodingKey {
        case name
    }

    /// Decodes `{"name", "length", "sha256"}`.
    public init(from decoder: any Decoder) throws {
        name = try decoder.container(keyedBy: CodingKeys.self).decode(String.self, forKey: .name)
        file = try SyncAttachment(from: decoder)
    }

    /// Encodes `{"name", "length", "sha256"}` (the file's part tells the store the record
    /// holds it).
    public func encode(to encoder: any Encoder) throws {
        try file.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(name, forKey: .name)
    }

    /// The most attachments a version carries.
    public static let maximumPerVersion = 16

    /// What a name must be, for hosts to take a version carrying it.
    public static let nameRule = "1 to 255 bytes of UTF-8 without a control character or '/', and not \".\" or \"..\""

    /// Whether `name` may name an attachment (``nameRule``): `save` offers it as a file's name.
    public static func isName(_ name: String) -> Bool {
        (1...255).contains(name.utf8.count) && name != "." && name != ".." && !name.contains("/")
            && !name.unicodeScalars.contains(where: \.isControl)
    }

    /// Checks a version's attachments as hosts do before showing it: at most
    /// ``maximumPerVersion``, sorted by name (byte order), each name once and valid; an empty
    /// list is left out.
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
