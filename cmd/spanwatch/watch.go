package main

import (
	"os"
	"time"
)

// fileWatch notices when any of a set of files changes (size, mtime, or
// appearance), by polling: no inotify dependency, and it follows files that
// editors replace by renaming.
type fileWatch struct {
	files []string
	state map[string]fileState
}

type fileState struct {
	size  int64
	mtime time.Time
	ok    bool
}

func newFileWatch(files []string) *fileWatch {
	w := &fileWatch{files: files, state: map[string]fileState{}}
	for _, f := range files {
		w.state[f] = statFile(f)
	}
	return w
}

func statFile(f string) fileState {
	fi, err := os.Stat(f)
	if err != nil {
		return fileState{}
	}
	return fileState{size: fi.Size(), mtime: fi.ModTime(), ok: true}
}

// changed reports whether a file changed since the watch began.
func (w *fileWatch) changed() bool {
	for _, f := range w.files {
		if statFile(f) != w.state[f] {
			return true
		}
	}
	return false
}
