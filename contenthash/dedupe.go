package contenthash

import (
	"github.com/agentfs/agentfs/branch"
)

// minDedupe is the smallest object worth sharing blocks for: below a
// block, nothing is saved.
const minDedupe = 4096

// dedupe shares the blocks of each newly hashed object with an older
// object of the same contents, where the backstore can clone (see
// "Identical contents" in the package doc). A failure costs only the
// space: it is logged.
func (h *Hasher) dedupe(objs map[string]branch.ObjectHash) {
	if !h.cfg.Objects.Info().Reflink {
		return
	}
	for id, oh := range objs {
		if oh.Size < minDedupe {
			continue
		}
		same, err := h.ObjectsWithHash(oh.Sum)
		if err != nil {
			h.log.Warn("dedupe: finding objects of the same contents", "object", id, "err", err)
			continue
		}
		// Every copy shares the blocks of one: the first by id.
		if len(same) < 2 || same[0] == id {
			continue
		}
		n, err := h.cfg.Objects.Dedupe(same[0], id, oh.Size)
		if err != nil {
			h.log.Warn("dedupe", "object", id, "with", same[0], "err", err)
			continue
		}
		if n > 0 {
			h.mu.Lock()
			h.deduped += n
			h.mu.Unlock()
			h.log.Info("dedupe: blocks shared", "object", id, "with", same[0], "bytes", n)
		}
	}
}

// Deduped is the bytes this Hasher made share blocks with others.
func (h *Hasher) Deduped() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deduped
}
