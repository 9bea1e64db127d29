package record

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/parquet-go/parquet-go"
)

// blobRow is one row of blobs.parquet: a state's key and its contents.
type blobRow struct {
	Key     string `parquet:"key"`
	Content []byte `parquet:"content"`
}

// blobSchema is the table's schema: key (a string), content (binary);
// the root is named "schema", as pyarrow names it.
// Built at its first use: every agentfs command would pay for the
// reflection at its start (issue 29, the CLI's start).
var blobSchema = sync.OnceValue(func() *parquet.Schema {
	return parquet.NewSchema("schema", parquet.SchemaOf(blobRow{}))
})

// writeBlobs writes the contents of blobs to the Parquet file at p, in
// row groups of at most rowGroupBytes of contents (one larger blob is a
// row group of its own), reading one blob at a time. It returns the
// bytes of contents written.
func writeBlobs(p string, blobs []blobRef, rowGroupBytes int64, done <-chan struct{}) (total int64, err error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, fmt.Errorf("writing %s: %w", BlobsName, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("writing %s: %w", BlobsName, cerr)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	// Statistics and bounds of contents would copy each blob into the
	// page headers and the column index (min and max): none for them.
	w := parquet.NewGenericWriter[blobRow](bw, blobSchema(), parquet.Compression(&parquet.Snappy), parquet.CreatedBy("agentfs", "", ""),
		parquet.SkipPageBounds("content"), parquet.SkipPageStatistics("content"),
		parquet.ColumnPageBuffers(spillPool{dir: filepath.Dir(p)}))
	var buffered int64
	for _, b := range blobs {
		if err := interrupted(done); err != nil {
			return total, err
		}
		content, err := b.tree.ReadFile(b.path)
		if err != nil {
			return total, fmt.Errorf("reading the contents of %s (%s): %w", b.path, b.key, err)
		}
		if buffered > 0 && buffered+int64(len(content)) > rowGroupBytes {
			if err := w.Flush(); err != nil {
				return total, fmt.Errorf("writing %s: %w", BlobsName, err)
			}
			buffered = 0
		}
		if _, err := w.Write([]blobRow{{Key: b.key, Content: content}}); err != nil {
			return total, fmt.Errorf("writing %s: %w", BlobsName, err)
		}
		buffered += int64(len(content))
		total += int64(len(content))
	}
	if err := w.Close(); err != nil {
		return total, fmt.Errorf("writing %s: %w", BlobsName, err)
	}
	if err := bw.Flush(); err != nil {
		return total, fmt.Errorf("writing %s: %w", BlobsName, err)
	}
	return total, f.Sync()
}

// spillPool is parquet-go's pool of page buffers of a row group being
// written: files beside blobs.parquet, unlinked as soon as they are
// made (nothing of them outlives the writer, even killed), so that the
// compressed pages of a row group are not held in memory until it is
// flushed.
type spillPool struct{ dir string }

func (s spillPool) GetBuffer() io.ReadWriteSeeker {
	f, err := os.CreateTemp(s.dir, ".blobs-*.tmp")
	if err != nil {
		return errBuffer{err}
	}
	_ = os.Remove(f.Name())
	return f
}

func (spillPool) PutBuffer(b io.ReadWriteSeeker) {
	if f, ok := b.(*os.File); ok {
		_ = f.Close()
	}
}

// errBuffer is a buffer that could not be made: every call fails.
type errBuffer struct{ err error }

func (b errBuffer) Read([]byte) (int, error)       { return 0, b.err }
func (b errBuffer) Write([]byte) (int, error)      { return 0, b.err }
func (b errBuffer) Seek(int64, int) (int64, error) { return 0, b.err }
