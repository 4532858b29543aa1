public import MultipeerCore
import MultipeerTLS

extension Roster {
    /// Reads a roster file. It must be a regular file (not a symbolic link) owned by this
    /// process's user and writable by it alone: whoever can write it decides who may join.
    ///
    /// - Throws: `invalidArgument`, naming the file, the line and what is wrong, or how to fix
    ///   the file's permissions.
    public init(contentsOfFile path: String) throws {
        let contents = try ProtectedFile.read(
            path,
            protection: .ownerWritable,
            what: "the roster file",
            code: .invalidArgument
        )
        guard let text = String(validating: contents, as: UTF8.self) else {
            throw MultipeerError(.invalidArgument, "the roster file \(path) is not UTF-8 text")
        }
        try self.init(parsing: text, source: "the roster file \(path)")
    }
}
