// The types a user of the session meets that are defined in the layers below it, re-exported
// one by one: `import MultipeerSession` is all an application writes. Everything else in those
// layers is `package`, for this package's own targets only.
@_exported public import struct MultipeerCore.AvailablePeer
@_exported public import struct MultipeerCore.BufferLimits
@_exported public import struct MultipeerCore.GoodbyeReason
@_exported public import struct MultipeerCore.KeepaliveParameters
@_exported public import struct MultipeerCore.LinkQuality
@_exported public import struct MultipeerCore.MessageEncoding
@_exported public import struct MultipeerCore.MultipeerError
@_exported public import struct MultipeerCore.PeerKey
@_exported public import enum MultipeerCore.PeerLeftReason
@_exported public import struct MultipeerCore.ReconnectParameters
@_exported public import struct MultipeerCore.Roster
@_exported public import struct MultipeerTLS.KeyRing
@_exported public import struct MultipeerTLS.PeerIdentity
@_exported public import struct MultipeerTLS.PreSharedKey

// Peers are named by UUID and files by URL (resources): an application names them without
// importing Foundation (whose types are FoundationEssentials' where the new Foundation has split
// it out, as on Linux).
#if canImport(FoundationEssentials)
@_exported public import struct FoundationEssentials.URL
@_exported public import struct FoundationEssentials.UUID
#else
@_exported public import struct Foundation.URL
@_exported public import struct Foundation.UUID
#endif
