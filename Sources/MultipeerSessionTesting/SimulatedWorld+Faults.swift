/// The network's faults: what crosses between hosts, cut off (both ways or one), held back, or
/// slowed and lost on a path. A host's own faults (freezing, sleep, a kill, a clock stepped or
/// drifting) are ``SimulatedHost``'s.
extension SimulatedWorld {
    /// Cuts `side` off from `otherSide` (nil: from every other host): nothing crosses between
    /// them either way, and what was on its way is lost (as when a link goes down); connections
    /// stay open (as with firewall rules that drop everything).
    /// ``SimulatedPartition/heal()`` undoes it, and ``heal()`` every partition at once.
    @discardableResult
    public func partition(_ side: [SimulatedHost], from otherSide: [SimulatedHost]? = nil) async -> SimulatedPartition {
        await addCut(side, from: otherSide, "\(names(side)) cut off from \(names(otherSide))", kind: "partition")
    }

    /// Cuts what `senders` send to `receivers` (nil: to every other host), and nothing the other
    /// way: half a partition, as a firewall rule that drops one direction, or a radio link that
    /// carries one, makes. What was on its way in that direction is lost. TCP then goes
    /// half-open: a connection cannot be made either way (its handshake needs both), the
    /// receivers still hear what the senders' peers send them but their acknowledgements and
    /// answers never arrive, and each side's keepalive finds the other silent.
    /// ``SimulatedPartition/heal()`` undoes it (``heal()``, every cut at once).
    ///
    /// ```swift
    /// func aHalfOpenLink(in world: SimulatedWorld, captain: SimulatedHost, relief: SimulatedHost) async {
    ///     let cut = await world.cut(from: [relief], to: [captain])
    ///     await world.run(for: .seconds(10))
    ///     await cut.heal()
    /// }
    /// ```
    @discardableResult
    public func cut(from senders: [SimulatedHost], to receivers: [SimulatedHost]? = nil) async -> SimulatedPartition {
        await addCut(
            senders,
            from: receivers,
            "what \(names(senders)) send to \(names(receivers)) cut",
            kind: "one-way cut"
        ) {
            $0.oneWay = true
        }
    }

    /// Holds what crosses between `side` and `otherSide` (nil: every other host), either way:
    /// nothing is lost, it waits, in the order it came, and arrives at once when the hold is let
    /// go (``SimulatedPartition/heal()``, or ``heal()``), as turmoil's `hold` and `release` do.
    /// For scripting an exact interleaving: what one host sends reaches the other only after
    /// something else has happened. TCP's timers go on meanwhile (a hold longer than a
    /// retransmission timeout sends segments again, which arrive twice and are taken once; one
    /// longer than the keepalive's timeout is a silence the sessions see).
    ///
    /// ```swift
    /// func theReliefHearsLate(in world: SimulatedWorld, captain: SimulatedHost, relief: SimulatedHost) async {
    ///     let hold = await world.hold([captain], from: [relief])
    ///     // ... what the captain sends now waits ...
    ///     await hold.heal()  // and arrives now, all of it, in order
    /// }
    /// ```
    @discardableResult
    public func hold(_ side: [SimulatedHost], from otherSide: [SimulatedHost]? = nil) async -> SimulatedPartition {
        await addCut(
            side,
            from: otherSide,
            "what crosses between \(names(side)) and \(names(otherSide)) held",
            kind: "hold"
        ) {
            $0.holds = true
        }
    }

    /// Undoes every partition, black hole, one-way cut and hold: what was held arrives, what was
    /// lost is sent again, as TCP does.
    public func heal() async {
        record("fault: every partition healed")
        await inWorld { [network] in network.heal() }
    }

    func heal(_ number: Int) async {
        record("fault: partition \(number) healed")
        await inWorld { [network] in network.heal(number) }
    }

    /// Gives the path from `a` to `b`, and the path back unless `oneWay`, a delay (`latency`
    /// each way, plus up to `jitter`), a loss rate (0 to 1) and a bandwidth (bytes a second;
    /// nil: unlimited), before what ``SimulatedHost/impair(latency:jitter:loss:bandwidth:)`` gave
    /// either host. A path's bandwidth is one link's: every connection on it shares it, each
    /// direction its own.
    ///
    /// ```swift
    /// func aSlowUplink(in world: SimulatedWorld, cabin: SimulatedHost, cockpit: SimulatedHost) async {
    ///     await world.impair(from: cabin, to: cockpit, oneWay: true, latency: .milliseconds(300), bandwidth: 64_000)
    /// }
    /// ```
    public func impair(
        from a: SimulatedHost,
        to b: SimulatedHost,
        oneWay: Bool = false,
        latency: Duration,
        jitter: Duration = .zero,
        loss: Double = 0,
        bandwidth: Int? = nil
    ) async {
        let path = SimulatedNetwork.Path(
            latency: latency.nanoseconds,
            jitter: jitter.nanoseconds,
            loss: loss,
            bandwidth: bandwidth.map(Int64.init)
        )
        record(
            "fault: path \(a.name) \(oneWay ? "->" : "<->") \(b.name) impaired (\(latency) +- \(jitter), loss \(loss), bandwidth \(bandwidth.map { "\($0) B/s" } ?? "unlimited"))"
        )
        await setPath(from: a, to: b, oneWay: oneWay, path)
    }

    /// Undoes ``impair(from:to:oneWay:latency:jitter:loss:bandwidth:)``: the path from `a` to
    /// `b` (and back, unless `oneWay`) is the hosts' again.
    public func repair(from a: SimulatedHost, to b: SimulatedHost, oneWay: Bool = false) async {
        record("fault: path \(a.name) \(oneWay ? "->" : "<->") \(b.name) repaired")
        await setPath(from: a, to: b, oneWay: oneWay, nil)
    }

    private func setPath(from a: SimulatedHost, to b: SimulatedHost, oneWay: Bool, _ path: SimulatedNetwork.Path?) async
    {
        let (network, a, b) = (network, a.machine, b.machine)
        await inWorld {
            network.impair(from: a, to: b, path)
            if !oneWay { network.impair(from: b, to: a, path) }
        }
    }

    private func addCut(
        _ side: [SimulatedHost],
        from otherSide: [SimulatedHost]?,
        _ what: String,
        kind: String,
        _ shape: (inout SimulatedNetwork.Cut) -> Void = { _ in }
    ) async -> SimulatedPartition {
        let number = cutNumbers.withLockedValue { last in
            last += 1
            return last
        }
        record("fault: \(what) (\(kind) \(number))")
        var cut = SimulatedNetwork.Cut(
            number: number,
            side: Set(side.map { ObjectIdentifier($0.machine) }),
            otherSide: otherSide.map { Set($0.map { ObjectIdentifier($0.machine) }) }
        )
        shape(&cut)
        await inWorld { [network, cut] in network.cut(cut) }
        return SimulatedPartition(world: self, number: number)
    }

    private func names(_ hosts: [SimulatedHost]?) -> String {
        hosts.map { $0.map(\.name).joined(separator: ", ") } ?? "every other host"
    }
}

/// A partition, black hole, one-way cut or hold of a ``SimulatedWorld``, until healed.
public struct SimulatedPartition: Sendable {
    let world: SimulatedWorld
    let number: Int

    /// Undoes this one alone: what a hold kept arrives at once, in order; what a cut lost is
    /// sent again, as TCP does.
    public func heal() async {
        await world.heal(number)
    }
}
