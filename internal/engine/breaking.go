package engine

import (
	"github.com/opkit-dev/opkit/internal/compat"
)

// ReasonBreakingChange is the reason of an Operator's Ready=False when
// its definition would change its installed CRD in a way that breaks the
// CRD's clients or loses data (Options.AllowBreaking).
const ReasonBreakingChange = "BreakingChange"

// BreakingChangeError is Apply's refusal of a definition whose CRD
// breaks the installed one (package compat's).
type BreakingChangeError = compat.BreakingChangeError
