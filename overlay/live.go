package overlay

// LiveObjects calls fn with the object of every node that the kernel
// or an open file still holds: nodes with names, unlinked nodes that
// are open or known to the kernel, unnamed (O_TMPFILE) files, and
// nodes that a Reload cut loose (stale) until the kernel forgets them.
// Garbage collection must spare these objects even when no entry names
// them (backstore.GCOptions.InUse). An object may be named more than
// once. fn runs without the view's locks; its error stops LiveObjects
// and is returned as is.
func (v *FS) LiveObjects(fn func(id string) error) error {
	v.mu.RLock()
	v.nodesMu.Lock()
	ids := make([]string, 0, len(v.byObject)+len(v.staleNodes))
	for _, n := range v.byObject {
		if n.object != "" {
			ids = append(ids, n.object)
		}
	}
	for n := range v.staleNodes {
		if n.object != "" {
			ids = append(ids, n.object)
		}
	}
	v.nodesMu.Unlock()
	v.mu.RUnlock()
	for _, id := range ids {
		if err := fn(id); err != nil {
			return err
		}
	}
	return nil
}
