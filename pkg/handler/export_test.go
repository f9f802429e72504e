package handler

// The engine's limits on a result, for the tests that check they are
// the engine's.
const (
	MaxResultBytes = maxResultBytes
	MaxResultDepth = maxResultDepth
)
