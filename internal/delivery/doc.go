// Package delivery owns a delivery from its arrival to its runs: the
// Receiver takes what the hooks listener receives (webhook deliveries,
// CloudEvents), what an operator's Consumers bring (a GitHub poll, NATS,
// Kafka) and a person's redeliveries, checks each against its source
// (package source checks a sender's signature and reads its identity),
// records it in the archive and queues it; the Queue of an operator's
// accepted deliveries handles them after they are answered. It knows the
// engine only through Receiver.Running, which says what runs here.
//
// Flow: the operator's event workers take each delivery in the order
// received, up to eventWorkers at once per operator. The source's object
// is applied, then the handlers on event of its source run, in order, for
// the operator, each with the idempotency key
// <operator>/event/<source>/<delivery id>/<handler> (the sender's delivery
// id, or the archive's id for a sender that gives none; a redelivery on
// purpose, a key of its own, see Key) and retried by its policy. Then the archive records the delivery Handled, or Failed (a
// handler gave up, or the object could not be applied), with its runs and
// objects. A handler whose result refuses the delivery stops its
// handling: it is Handled, with the refusal as reason.
//
// Guarantees: the archive is the hand-over. A delivery is recorded
// Pending before it is answered, and an operator that starts handles its
// Pending ones, so a delivery acknowledged by an engine that died is
// handled by the next one. A handler that succeeded for it then is not
// run again (its key), and an interrupted one runs again with its key. A
// delivery being handled when its queue closes stays Pending.
package delivery
