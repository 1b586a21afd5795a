// cuda/train_prof.cuh — the trainer's device time by part (train/device.h bn_train_part): an event recorded on the
// stream where each part starts, the gaps between consecutive events added to the part that opened them once the
// stream has passed them. Internal to the trainer (through cuda/train_impl.cuh); include after "cuda/common.cuh" and
// "train/device.h".
#ifndef BONSAI_CUDA_TRAIN_PROF_CUH
#define BONSAI_CUDA_TRAIN_PROF_CUH

#define TRAIN_PROF_EVENTS 4096 // events per window: a full window is summed (the stream synchronized) and restarted

// train_prof: one window of marks and the sums so far. Zero-initialized: off, no events made yet.
struct train_prof {
    bool on;
    int n;                              // marks recorded in this window
    cudaEvent_t ev[TRAIN_PROF_EVENTS];  // made on the first mark
    int part[TRAIN_PROF_EVENTS];        // the part each mark opens (BN_TRAIN_PARTS: none, the window's end)
    bool made;
    double ms[BN_TRAIN_PARTS];
};

// prof_make: the window's events, once; 0 or -1 (err).
static inline int prof_make(train_prof *p, char *err, size_t errlen) {
    if (p->made) return 0;
    for (int i = 0; i < TRAIN_PROF_EVENTS; i++) BN_CUDA_TRY(cudaEventCreate(&p->ev[i]), err, errlen);
    p->made = true;
    return 0;
}

// prof_flush: ends the window on stream s (a closing mark), waits for it, adds each gap to the part of the mark that
// opened it and starts an empty window; 0 or -1 (err). Nothing to do when off or empty.
static inline int prof_flush(train_prof *p, cudaStream_t s, char *err, size_t errlen) {
    if (!p->on || p->n == 0) return 0;
    BN_CUDA_TRY(cudaEventRecord(p->ev[p->n], s), err, errlen);
    BN_CUDA_TRY(cudaEventSynchronize(p->ev[p->n]), err, errlen);
    for (int i = 0; i < p->n; i++) {
        float ms = 0;
        BN_CUDA_TRY(cudaEventElapsedTime(&ms, p->ev[i], p->ev[i + 1]), err, errlen);
        if (p->part[i] < BN_TRAIN_PARTS) p->ms[p->part[i]] += ms;
    }
    p->n = 0;
    return 0;
}

// prof_mark: part `part` starts here on stream s (nothing when off); 0 or -1 (err).
static inline int prof_mark(train_prof *p, int part, cudaStream_t s, char *err, size_t errlen) {
    if (!p->on) return 0;
    if (prof_make(p, err, errlen)) return -1;
    if (p->n + 1 >= TRAIN_PROF_EVENTS) { // room for this mark and a closing one
        if (prof_flush(p, s, err, errlen)) return -1;
    }
    BN_CUDA_TRY(cudaEventRecord(p->ev[p->n], s), err, errlen);
    p->part[p->n++] = part;
    return 0;
}

// prof_take: ms[] = the sums so far, which restart from zero.
static inline void prof_take(train_prof *p, double ms[BN_TRAIN_PARTS]) {
    for (int i = 0; i < BN_TRAIN_PARTS; i++) ms[i] = p->ms[i], p->ms[i] = 0;
}

// prof_free: the events (the struct itself is the caller's).
static inline void prof_free(train_prof *p) {
    if (!p->made) return;
    for (int i = 0; i < TRAIN_PROF_EVENTS; i++) cudaEventDestroy(p->ev[i]);
    p->made = false;
}

#endif
