// Package compare compares objects as the API server holds them, for the
// engine's writes: whether a child needs one (AppliedHash, Contains), and
// what a status write changes (StatusDelta, SameValue, the conditions as
// their JSON decodes).
//
// Contract: values are compared as JSON values, the way decoded objects
// hold them: an int64 and a float64 of the same integer are equal, a nil
// map or list is null, and a value of any other type is compared through
// its JSON. Nothing here changes its arguments, talks to a cluster or
// reads a clock: every function is pure, and table-tested.
package compare
