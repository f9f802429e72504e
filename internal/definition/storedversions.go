package definition

import "slices"

// CheckStoredVersions refuses a definition that drops a version its
// installed CRD still lists in status.storedVersions: objects may still
// be stored at that version, and the API server would refuse the CRD
// (its message speaks of status.storedVersions, not of what to do). The
// error is placed at spec.resource.versions, with the file's line, and
// says to keep the version (served: false stops serving it) until
// `opkit migrate` has rewritten the objects. stored is the installed
// CRD's status.storedVersions.
func (d *Definition) CheckStoredVersions(stored []string) error {
	if !d.Owns() {
		return nil
	}
	l := &errorList{file: d.Source, operator: d.Operator.Name}
	if d.src != nil {
		l.lines = d.src.lines
	}
	crd := d.CRD().Name
	var names []string
	for _, v := range d.Operator.Spec.Resource.Versions {
		names = append(names, v.Name)
	}
	for _, v := range stored {
		if slices.Contains(names, v) {
			continue
		}
		l.add("spec.resource.versions", "version %s is removed, but objects may still be stored at it (CRD %s lists it in status.storedVersions %v), and the API server refuses to drop it; keep it, with served: false to stop serving it, until `opkit migrate %s` has rewritten every object at %s, then remove it",
			v, crd, stored, crd, d.GVK.Version)
	}
	return l.err()
}
