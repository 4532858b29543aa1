import MultipeerSession

public import struct Foundation.URL
public import struct Foundation.UUID

/// The files on their way, both ways (docs/SYNC.md 9).
struct AttachmentTransfers {
    /// Files this station took in (``SyncStore/attach(fileAt:)``) that no record holds yet:
    /// kept from removal until one does, or the store restarts.
    var pending: Set<String> = []
    /// How many files are being taken in now: none is removed meanwhile (the one arriving has
    /// no name yet).
    var taking = 0
    /// The file each peer is sending this station, by SHA-256 (one transfer of a file at a
    /// time), and the bytes of it here.
    var arriving: [String: Arrival] = [:]
    /// Files the application asked for (``SyncStore/file(of:)``) of collections fetched on
    /// demand, until they arrive.
    var wanted: Set<SyncAttachment> = []
    /// The files this station is sending each peer, by SHA-256: each at most once at a time.
    var offered: Set<OutgoingFile.Key> = []
    /// The peers that asked for a file a version this station keeps lists, while it lacked the
    /// file: offered it when it arrives (store and forward, as versions are).
    var lackedBy: [SyncAttachment: Set<UUID>] = [:]
    /// Where the transfers this station begins go to be awaited (``SyncStore/run()``'s).
    var sending: AsyncStream<OutgoingFile>.Continuation?
}

/// A file on its way to this station: from which peer, in which of the session's transfers (a
/// new offer from the same peer supersedes one that lost its link), and how far.
struct Arrival {
    var peer: UUID
    var transfer: UUID
    var bytesDone: Int64
}

/// A file this station is sending a peer.
struct OutgoingFile: Sendable {
    struct Key: Hashable {
        var peer: UUID
        var sha256: String
    }

    var key: Key
    var attachment: SyncAttachment
    var transfer: OutgoingResource
}

extension SyncStore {
    /// The metadata key of the session's resources that carry attachments' files.
    static let attachmentKey = "multipeer.sync.attachment"

    /// Takes a copy of the file at `fileURL` into the store (beside its database, under its
    /// SHA-256) and returns its attachment, to put in a record: the file stays once a record
    /// holds it, and goes to the peers with the record. Reads the file once, off the store's
    /// executor.
    /// - Throws: `attachmentFailed` if the file cannot be read or copied, or the store keeps
    ///   no files.
    public func attach(fileAt fileURL: URL) async throws(SyncError) -> SyncAttachment {
        let files = try attachmentFiles()
        transfers.taking += 1
        let taken = await Task.detached { () -> Result<SyncAttachment, SyncError> in
            Result { () throws(SyncError) in try files.take(fileURL) }
        }.value
        transfers.taking -= 1
        let attachment = try taken.get()
        transfers.pending.insert(attachment.hex)
        return attachment
    }

    /// The file of `attachment` on this device. If the store lacks it, it asks every active
    /// peer for it (and each peer that joins later), and waits until it arrives, its SHA-256
    /// checked; cancel the task to stop waiting. The file is the store's: read or copy it,
    /// never change or move it.
    /// - Throws: `attachmentFailed` if no record the store keeps holds `attachment`, the
    ///   session has no `resourceDirectory` (its configuration's) to receive it in,
    ///   or the task was cancelled before it arrived.
    public func file(of attachment: SyncAttachment) async throws(SyncError) -> URL {
        let files = try attachmentFiles()
        if files.holds(attachment) { return files.path(of: attachment) }
        guard try station.storage.attachments()[attachment] != nil else {
            throw SyncError(.attachmentFailed, "no record this station keeps holds \(attachment)")
        }
        guard session.configuration.resourceDirectory != nil else {
            throw SyncError(
                .attachmentFailed,
                "\(attachment) cannot arrive: the session has no resourceDirectory to receive files in"
            )
        }
        let arrived = arrivals.subscribe(holding: 1) { $0 == attachment }
        transfers.wanted.insert(attachment)
        for peer in session.activePeers { await ask(for: [attachment], from: peer.id) }
        if await arrived.next() != nil { return files.path(of: attachment) }  // (it arrived: once, or more)
        if files.holds(attachment) { return files.path(of: attachment) }
        throw SyncError(.attachmentFailed, "the wait for \(attachment) was cancelled before it arrived")
    }

    /// Where the file of `attachment` stands on this station: here, on its way, or neither.
    public func fileState(of attachment: SyncAttachment) -> SyncFileState {
        if files?.holds(attachment) == true { return .held }
        if let arriving = transfers.arriving[attachment.hex] { return .arriving(bytesDone: arriving.bytesDone) }
        return .missing
    }

    func attachmentFiles() throws(SyncError) -> AttachmentFiles {
        guard let files else { throw SyncError(.attachmentFailed, "this store keeps no files") }
        return files
    }

    /// The files this station fetches and lacks, not on their way (but from `peer`, whose
    /// transfer may have lost its link: a peer that restarted forgot it, and offers the file
    /// anew when asked): of collections fetched at once, and those the application asked for.
    func missingAttachments(askingOf peer: UUID? = nil) throws(SyncError) -> [SyncAttachment] {
        guard let files else { return [] }
        return try station.storage.attachments().compactMap { attachment, collections in
            let fetched =
                transfers.wanted.contains(attachment)
                || collections.contains { attachmentPolicy(of: $0) == .atOnce }
            let onItsWay = transfers.arriving[attachment.hex].map { $0.peer != peer } ?? false
            return fetched && !onItsWay && !files.holds(attachment) ? attachment : nil
        }
    }

    /// Asks `peer` for those of `attachments` this station lacks and that are not on their way
    /// from another peer (one on its way from `peer` is asked for again: if the peer restarted,
    /// it forgot the transfer; if not, it goes on and offers nothing twice).
    func ask(for attachments: Set<SyncAttachment>, from peer: UUID) async {
        guard let files, session.configuration.resourceDirectory != nil else { return }
        let lacking = attachments.filter {
            (transfers.arriving[$0.hex].map { $0.peer == peer } ?? true) && !files.holds($0)
        }
        for chunk in lacking.map(\.sha256).sorted(by: { $0.lexicographicallyPrecedes($1) })
            .chunks(of: SyncMessage.maximumLack)
        {
            await send(.lack(Array(chunk)), to: peer)
        }
    }

    /// `peer` lacks these files: those this station holds, of records it keeps, go to it as
    /// the session's resources (each once at a time).
    func offer(_ lacking: [[UInt8]], to peer: UUID) async throws(SyncError) {
        guard let files else { return }
        var kept: [[UInt8]: SyncAttachment] = [:]
        for attachment in try station.storage.attachments().keys { kept[attachment.sha256] = attachment }
        for sha256 in Set(lacking) {
            guard let attachment = kept[sha256] else { continue }
            guard files.holds(attachment) else {
                transfers.lackedBy[attachment, default: []].insert(peer)
                continue
            }
            let key = OutgoingFile.Key(peer: peer, sha256: attachment.hex)
            guard transfers.offered.insert(key).inserted else { continue }
            do {
                let transfer = try await session.sendResource(
                    at: files.path(of: attachment),
                    named: attachment.hex,
                    metadata: [Self.attachmentKey: attachment.hex],
                    to: peer
                )
                transfers.sending?.yield(OutgoingFile(key: key, attachment: attachment, transfer: transfer))
            } catch {
                transfers.offered.remove(key)
                report(.failed(SyncError(.attachmentFailed, "could not send \(attachment) to \(peer): \(error)")))
            }
        }
    }

    /// Awaits the transfers this station begins, each to its end (``run()``'s).
    func send(_ outgoing: AsyncStream<OutgoingFile>) async {
        await withDiscardingTaskGroup { group in
            for await file in outgoing {
                group.addTask {
                    var report = SyncFileTransfer(starting: file.attachment, peer: file.key.peer, direction: .outgoing)
                    for await progress in file.transfer.progress {
                        report.progress = progress
                        self.report(.fileTransfer(report))
                    }
                    do {
                        try await file.transfer.completion()
                        report.end(nil)
                    } catch {
                        let failure = SyncError(
                            .attachmentFailed,
                            "\(file.key.sha256) did not reach \(file.key.peer): \(error)"
                        )
                        report.end(failure)
                        self.report(.failed(failure))
                    }
                    self.report(.fileTransfer(report))
                    await self.sent(file.key)
                }
            }
        }
    }

    private func sent(_ key: OutgoingFile.Key) {
        transfers.offered.remove(key)
    }

    /// Takes the files peers send, each as its transfer begins (``run()``'s).
    func receive(_ incoming: AsyncStream<IncomingResource>) async {
        await withDiscardingTaskGroup { group in
            for await resource in incoming { group.addTask { await self.receive(resource) } }
        }
    }

    /// Takes one file a peer sends, if a record this station keeps holds it and it is neither
    /// here nor on its way from another peer; cancels it otherwise.
    private func receive(_ resource: IncomingResource) async {
        let peer = resource.sender.id
        guard let files, let attachment = try? SyncAttachment(sha256: resource.sha256, length: resource.length) else {
            return resource.cancel()
        }
        do throws(SyncError) {
            guard try station.storage.attachments()[attachment] != nil else {
                resource.cancel()
                report(
                    .refused(
                        SyncError(
                            .attachmentFailed,
                            "\(peer) sent \(attachment), which no record this station keeps holds"
                        ),
                        from: peer
                    )
                )
                return
            }
        } catch {
            resource.cancel()
            return report(.failed(error))
        }
        // (Here already, or on its way from another peer: this copy is not needed. From the
        // same peer, it supersedes the transfer that lost its link, docs/PROTOCOL.md 3c.)
        guard !files.holds(attachment), transfers.arriving[attachment.hex].map({ $0.peer == peer }) ?? true else {
            return resource.cancel()
        }
        transfers.arriving[attachment.hex] = Arrival(peer: peer, transfer: resource.id, bytesDone: 0)
        var progress = SyncFileTransfer(starting: attachment, peer: peer, direction: .incoming)
        for await reported in resource.progress {
            progress.progress = reported
            if transfers.arriving[attachment.hex]?.transfer == resource.id {
                transfers.arriving[attachment.hex]?.bytesDone = reported.bytesDone
            }
            report(.fileTransfer(progress))
        }
        do {
            let arrived = try await resource.file()
            try files.keep(arrived, as: attachment)
            transfers.arriving[attachment.hex] = nil  // (whole: whichever transfer brought it)
            transfers.wanted.remove(attachment)
            progress.end(nil)
            report(.fileTransfer(progress))
            report(.attachmentArrived(attachment, from: peer))
            arrivals.yield(attachment)
            let waiting = transfers.lackedBy.removeValue(forKey: attachment) ?? []
            let active = Set(session.activePeers.map(\.id))
            for other in waiting where other != peer && active.contains(other) {
                try? await offer([attachment.sha256], to: other)
            }
        } catch {
            if transfers.arriving[attachment.hex]?.transfer == resource.id { transfers.arriving[attachment.hex] = nil }
            let failure = SyncError(.attachmentFailed, "\(attachment) from \(peer) did not arrive: \(error)")
            progress.end(failure)
            report(.fileTransfer(progress))
            report(.failed(failure))
        }
    }

    /// Removes the files of the versions the station let go that no version it keeps lists
    /// now (reported if that fails: ``removeUnheldFiles()`` tries again at the next collection).
    func removeReleasedFiles() {
        let released = station.released
        guard let files, !released.isEmpty, transfers.taking == 0 else { return }  // (else at the next)
        station.released = []
        do throws(SyncError) {
            let held = try station.storage.attachments()
            for attachment in released where held[attachment] == nil && !transfers.pending.contains(attachment.hex) {
                try files.remove(attachment.hex)
                transfers.lackedBy[attachment] = nil
            }
        } catch {
            report(.failed(error))
        }
    }

    /// Removes the files no record this station keeps holds (but those taken in for a record
    /// not put yet, and those on their way).
    func removeUnheldFiles() throws(SyncError) {
        guard let files, transfers.taking == 0 else { return }
        let held = Set(try station.storage.attachments().keys.map { $0.hex })
        for name in files.held()
        where !held.contains(name) && !transfers.pending.contains(name) && transfers.arriving[name] == nil {
            try files.remove(name)
        }
    }
}
