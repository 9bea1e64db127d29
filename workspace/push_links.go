package workspace

import (
	"errors"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/overlay"
	"github.com/agentfs/agentfs/remote"
)

// Hard links in pushed documents: see "Push" in push.go, and
// remote.Change.Link.

// linkedFile is a regular file of a document with more than one name.
type linkedFile struct {
	change int
	id     [2]uint64 // st_dev, st_ino in the view
	nlink  uint64
}

// linkFiles names the hard links among doc's files: every name of a
// file but the first in doc's order gets Link, the first's path. A
// name that is no change (a project file given another name in the
// view: copied up, its contents the project's) is added to doc as a
// change, at the end, so that a pull makes the link there too.
func (b *pushBuild) linkFiles(doc *remote.SnapshotDoc, name string, lower, v *overlay.FS, links []linkedFile) error {
	if len(links) == 0 {
		return nil
	}
	groups := map[[2]uint64][]int{}
	var order [][2]uint64
	nlinks := map[[2]uint64]uint64{}
	for _, l := range links {
		if groups[l.id] == nil {
			order = append(order, l.id)
		}
		groups[l.id] = append(groups[l.id], l.change)
		nlinks[l.id] = l.nlink
	}
	// The names that are no change: the view's other entries of the
	// same object.
	missing := map[string][2]uint64{}
	for _, id := range order {
		if uint64(len(groups[id])) >= nlinks[id] {
			continue
		}
		obj, _, err := v.DataOfPath(doc.Changes[groups[id][0]].Path)
		if err != nil {
			return eioErrorf(err, "push: %s: %s: %v", name, doc.Changes[groups[id][0]].Path, err)
		}
		if obj != "" {
			missing[obj] = id
		}
	}
	if len(missing) > 0 {
		inDoc := make(map[string]bool, len(doc.Changes))
		for _, ch := range doc.Changes {
			inDoc[ch.Path] = true
		}
		objs := map[string]bool{}
		for obj := range missing {
			objs[obj] = true
		}
		paths := v.UpperPaths(objs)
		for obj, ps := range paths {
			slices.Sort(ps)
			for _, p := range ps {
				if inDoc[p] {
					continue
				}
				c := overlay.Change{Path: p, Kind: overlay.Created}
				var err error
				if c.New, err = v.InfoPath(p); err != nil {
					return eioErrorf(err, "push: %s: %s: %v", name, p, err)
				}
				if c.Old, err = lower.InfoPath(p); err == nil {
					c.Kind = overlay.Modified
				} else if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
					return eioErrorf(err, "push: the project: %s: %v", p, err)
				}
				var more []linkedFile
				if err := b.change(doc, name, lower, v, c, &more); err != nil {
					return err
				}
				id := missing[obj]
				groups[id] = append(groups[id], len(doc.Changes)-1)
			}
		}
	}
	for _, id := range order {
		g := groups[id]
		for _, i := range g[1:] {
			doc.Changes[i].Link = doc.Changes[g[0]].Path
		}
	}
	return nil
}
