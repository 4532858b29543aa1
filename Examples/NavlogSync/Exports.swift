// The clock of a version's timestamp is the replicated store's (MultipeerSync): re-exported, so
// `import NavlogSync` is all a user of the log writes.
@_exported public import struct MultipeerSync.HLCTimestamp
