// Package compat compares two CustomResourceDefinitions of one custom
// resource — the old one (installed in the cluster, or built from a
// previous file) and the new one (built by definition.(*Definition).CRD)
// — and finds each change that would break the resource's clients or lose
// its data. It is a pure function of the two CRDs: it reads no cluster.
//
// # Breaking changes
//
// A change is [Breaking] when objects or clients that worked before stop
// working, or data is lost:
//
//   - a field removed: the API server prunes fields its schema does not
//     declare, so the field's values are dropped from every object as it
//     is read or written, and clients that set it see it silently dropped;
//   - a type narrowed: a type changed (integer to number is a widening and
//     passes; number to integer, string to integer... do not), an
//     int-or-string that no longer is, a format added or tightened (int32
//     to int64 and float to double widen);
//   - a new required field without a default, or an optional field made
//     required: objects and clients that leave it out are refused;
//   - an enum tightened (a value removed, or an enum added), a bound
//     tightened (minimum/maximum and their exclusive forms, minLength/
//     maxLength, minItems/maxItems, minProperties/maxProperties,
//     multipleOf, uniqueItems, a list type that becomes set or map), or a
//     pattern added or changed: writes of values that passed before are
//     refused (an object that already holds one keeps it, and while that
//     field is left unchanged it can still be updated: the API server's
//     validation ratcheting);
//   - x-kubernetes-preserve-unknown-fields removed, or additionalProperties
//     removed: the fields the schema does not declare are pruned;
//   - a version removed while it is still in the installed CRD's
//     status.storedVersions: objects are stored in it, and the API server
//     refuses the change; they are rewritten at the storage version first
//     (opkit migrate);
//   - a served version removed, or no longer served, or its scale
//     subresource removed: its clients get 404 Not Found;
//   - the storage version changed to one whose schema differs, without
//     conversion: objects stored before are served in the new version as
//     they are (the CRD's conversion is None) and lose the fields it does
//     not declare. Only a CRD with conversion (a conversion webhook, as
//     a definition that declares conversion has: see converts, the one
//     place that decides) may change it;
//   - the scope changed (the API server refuses it), or the group, kind or
//     plural changed: that is another CRD, and the objects of the old one
//     are orphaned. When the group or plural changed (the CRD's name), only
//     that is reported: the rest compares two unrelated resources.
//
// # Warnings
//
// A [Warning] is risky but not breaking: a new or changed
// x-kubernetes-validations rule (writes that break it are refused; a
// transition rule, one reading oldSelf, only judges changes and passes), a
// default changed or removed, nullable removed (nulls are then pruned), a
// field that is no longer declared but kept because its object preserves
// unknown fields, a new declared field in an object that preserved unknown
// fields (objects may already hold another type there), allOf/anyOf/oneOf/
// not changed (not compared: check them by hand), a short name removed or
// the singular name changed (kubectl commands that use it fail).
//
// Safe changes are not reported: a new optional field, a wider enum,
// looser bounds, a new version, printer columns, descriptions, a default
// added.
//
// # What is compared
//
// Versions are matched by name; each version's .spec schema is compared
// with the same version's in the old CRD. The .status schema is the
// operator's own output, rewritten at each reconcile, and is not compared.
// When the old CRD has no status.storedVersions (one built from a file,
// never installed), its storage version is taken as the one stored.
//
// Each [Finding] names its place twice: Field as a user reads it
// (versions[v1].spec.size), and DefinitionField as the field of the new
// Operator definition (spec.resource.versions[0].schema.properties.size),
// for definition.(*Definition).Line to find its line. DefinitionField
// assumes the new CRD was built by definition.(*Definition).CRD, whose
// versions are the definition's, in its order; a removed field has no line
// of its own, and is placed at its nearest parent that has one.
package compat
