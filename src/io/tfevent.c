/* tfevent.c - TensorBoard event files (see tfevent.h): CRC-32C, TFRecord
 * framing, the append-only writer and the reader.  Events are built and
 * parsed with the protobuf-c code generated from tfevent.proto.
 *
 * Invariants: a record is assembled in memory and handed to stdio in one
 * fwrite, so the file holds whole records plus at most one torn record at
 * its end after a crash; nothing is ever rewritten. */
#include "io/tfevent.h"

#include "core/error.h"
#include "io/codec.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* --- CRC-32C and framing ------------------------------------------------------------ */

static uint32_t crc_table[256];
static atomic_int crc_ready;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
    atomic_store(&crc_ready, 1); /* racing initialisers write the same values */
}

uint32_t dl_crc32c(uint32_t crc, const void *buf, size_t n) {
    if (!atomic_load(&crc_ready)) crc_init();
    const uint8_t *p = buf;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t dl_crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int dl_tfrecord_next(const uint8_t *buf, size_t n, size_t *off, const uint8_t **data, size_t *len,
                     const char *name) {
    size_t o = *off;
    if (n - o < 12) return 0;
    uint64_t m = get_le(buf + o, 8);
    if ((uint32_t)get_le(buf + o + 8, 4) != dl_crc32c_mask(dl_crc32c(0, buf + o, 8)))
        return dl_error("tfevent: %s: record at byte %zu: length CRC mismatch", name, o);
    if (m > n - o - 12 || n - o - 12 - m < 4) return 0; /* torn last record */
    const uint8_t *d = buf + o + 12;
    if ((uint32_t)get_le(d + m, 4) != dl_crc32c_mask(dl_crc32c(0, d, m)))
        return dl_error("tfevent: %s: record at byte %zu: data CRC mismatch", name, o);
    *data = d;
    *len = m;
    *off = o + 12 + m + 4;
    return 1;
}

#ifdef DL_WITH_PROTOBUF_C

#include "tfevent.pb-c.h"

int dl_tfevent_available(void) {
    return 1;
}

/* --- the writer ------------------------------------------------------------------------ */

struct dl_tfevent_writer {
    FILE *f;
    char *path;
    double flush_secs;
    int max_queue;
    int pending;       /* records written since the last flush */
    double last_flush; /* wall time of the last flush */
    int broken;        /* a write failed: nothing more is appended after it */
};

static double now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* mkdir -p */
static int make_dirs(const char *dir) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return dl_error("SummaryWriter: log_dir is too long");
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST)
                return dl_error("SummaryWriter: cannot create '%s': %s", p, strerror(errno));
            *s = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return dl_error("SummaryWriter: '%s' is not a directory", dir);
    return 0;
}

static int write_failed(dl_tfevent_writer *w) {
    w->broken = 1;
    return dl_error("SummaryWriter: cannot write '%s': %s", w->path, strerror(errno));
}

int dl_tfevent_flush(dl_tfevent_writer *w) {
    if (w->broken)
        return dl_error("SummaryWriter: '%s' had a write error; open a new writer", w->path);
    if (fflush(w->f) != 0) return write_failed(w);
    w->pending = 0;
    w->last_flush = now();
    return 0;
}

/* Frames the event and appends it; flushes by the writer's policy. */
static int write_event(dl_tfevent_writer *w, const Dltb__Event *ev) {
    if (w->broken)
        return dl_error("SummaryWriter: '%s' had a write error; open a new writer", w->path);
    size_t m = dltb__event__get_packed_size(ev);
    uint8_t *rec = malloc(m + 16);
    if (!rec) return dl_error("SummaryWriter: out of memory (%zu-byte event)", m);
    put_le(rec, m, 8);
    put_le(rec + 8, dl_crc32c_mask(dl_crc32c(0, rec, 8)), 4);
    dltb__event__pack(ev, rec + 12);
    put_le(rec + 12 + m, dl_crc32c_mask(dl_crc32c(0, rec + 12, m)), 4);
    size_t wrote = fwrite(rec, 1, m + 16, w->f);
    free(rec);
    if (wrote != m + 16) return write_failed(w);
    w->pending++;
    if (w->pending >= w->max_queue || now() - w->last_flush >= w->flush_secs)
        return dl_tfevent_flush(w);
    return 0;
}

dl_tfevent_writer *dl_tfevent_open(const char *dir, const char *suffix, double flush_secs,
                                   int max_queue) {
    static atomic_int counter;
    if (!dir || !*dir) {
        dl_error("SummaryWriter: log_dir is empty");
        return NULL;
    }
    if (make_dirs(dir)) return NULL;
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    dl_tfevent_writer *w = calloc(1, sizeof *w);
    char path[PATH_MAX];
    FILE *f = NULL;
    dl_error("SummaryWriter: no new event file name in '%s'", dir); /* unless set below */
    for (int tries = 0; w && !f && tries < 100; tries++) {
        int len = snprintf(path, sizeof path, "%s/events.out.tfevents.%010lld.%s.%ld.%d%s", dir,
                           (long long)time(NULL), host, (long)getpid(),
                           atomic_fetch_add(&counter, 1), suffix ? suffix : "");
        if (len >= (int)sizeof path) {
            dl_error("SummaryWriter: event file name in '%s' is too long", dir);
            break;
        }
        f = fopen(path, "wbx"); /* a new file, never one that exists */
        if (!f && errno != EEXIST) {
            dl_error("SummaryWriter: cannot create '%s': %s", path, strerror(errno));
            break;
        }
    }
    if (!w || !f || !(w->path = strdup(path))) {
        if (!w || (f && !w->path)) dl_error("SummaryWriter: out of memory");
        if (f) fclose(f);
        free(w);
        return NULL;
    }
    w->f = f;
    w->flush_secs = flush_secs;
    w->max_queue = max_queue < 1 ? 1 : max_queue;
    w->last_flush = now();
    Dltb__Event ev = DLTB__EVENT__INIT;
    ev.wall_time = now();
    ev.what_case = DLTB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    if (write_event(w, &ev) || dl_tfevent_flush(w)) {
        dl_tfevent_close(w);
        return NULL;
    }
    return w;
}

const char *dl_tfevent_path(const dl_tfevent_writer *w) {
    return w->path;
}

int dl_tfevent_close(dl_tfevent_writer *w) {
    if (!w) return 0;
    int rc = 0;
    if (fclose(w->f) != 0)
        rc = dl_error("SummaryWriter: cannot write '%s': %s", w->path, strerror(errno));
    free(w->path);
    free(w);
    return rc;
}

/* An Event holding one Summary.Value v. */
static int write_value(dl_tfevent_writer *w, Dltb__Value *v, int64_t step, double wall_time) {
    Dltb__Summary s = DLTB__SUMMARY__INIT;
    Dltb__Value *vals[1] = {v};
    s.n_value = 1;
    s.value = vals;
    Dltb__Event ev = DLTB__EVENT__INIT;
    ev.wall_time = wall_time < 0 ? now() : wall_time;
    ev.step = step;
    ev.what_case = DLTB__EVENT__WHAT_SUMMARY;
    ev.summary = &s;
    return write_event(w, &ev);
}

int dl_tfevent_add_scalar(dl_tfevent_writer *w, const char *tag, float value, int64_t step,
                          double wall_time) {
    Dltb__Value v = DLTB__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = DLTB__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = value;
    return write_value(w, &v, step, wall_time);
}

int dl_tfevent_add_image(dl_tfevent_writer *w, const char *tag, int height, int width, int channels,
                         const uint8_t *png, size_t png_len, int64_t step, double wall_time) {
    Dltb__Image im = DLTB__IMAGE__INIT;
    im.height = height;
    im.width = width;
    im.colorspace = channels;
    im.encoded_image_string.data = (uint8_t *)png;
    im.encoded_image_string.len = png_len;
    Dltb__Value v = DLTB__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = DLTB__VALUE__VALUE_IMAGE;
    v.image = &im;
    return write_value(w, &v, step, wall_time);
}

/* TensorBoard's default bucket right edges: -DBL_MAX, -1e20/1.1.. -1e-12, 0,
 * 1e-12 .. 1e20/1.1, DBL_MAX (ascending).  Returns the count. */
static size_t default_limits(double *out, size_t cap) {
    double pos[1024];
    size_t np = 0;
    for (double v = 1e-12; v < 1e20 && np < 1023; v *= 1.1) pos[np++] = v;
    pos[np++] = DBL_MAX;
    size_t k = 0;
    for (size_t i = np; i-- > 0 && k < cap;) out[k++] = -pos[i];
    if (k < cap) out[k++] = 0.0;
    for (size_t i = 0; i < np && k < cap; i++) out[k++] = pos[i];
    return k;
}

int dl_tfevent_add_histogram(dl_tfevent_writer *w, const char *tag, const double *x, size_t n,
                             int64_t step, double wall_time) {
    if (n == 0) return dl_error("add_histogram: values is empty");
    double limits[2100];
    size_t nl = default_limits(limits, sizeof limits / sizeof limits[0]);
    double *counts = calloc(nl, sizeof *counts);
    if (!counts) return dl_error("add_histogram: out of memory");
    double mn = x[0], mx = x[0], sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        double t = x[i];
        if (!isfinite(t)) {
            free(counts);
            return dl_error("add_histogram: values must be finite (element %zu is %g)", i + 1, t);
        }
        mn = t < mn ? t : mn;
        mx = t > mx ? t : mx;
        sum += t;
        sq += t * t;
        /* bucket b holds limits[b-1] <= t < limits[b]: b = number of limits <= t */
        size_t lo = 0, hi = nl;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (limits[mid] <= t)
                lo = mid + 1;
            else
                hi = mid;
        }
        counts[lo < nl ? lo : nl - 1] += 1;
    }
    /* from the empty bucket before the first non-empty one (its limit is the
     * left edge of the data) to the last non-empty one; a run of empty
     * buckets becomes its last bucket, as TensorFlow's histogram writes it */
    size_t first = 0, last = nl - 1, k = 0;
    while (counts[first] == 0) first++;
    while (counts[last] == 0) last--;
    if (first > 0) first--;
    for (size_t i = first; i <= last; i++) {
        if (counts[i] == 0 && i + 1 <= last && counts[i + 1] == 0) continue;
        limits[k] = limits[i];
        counts[k++] = counts[i];
    }
    Dltb__Histogram h = DLTB__HISTOGRAM__INIT;
    h.min = mn;
    h.max = mx;
    h.num = (double)n;
    h.sum = sum;
    h.sum_squares = sq;
    h.n_bucket_limit = h.n_bucket = k;
    h.bucket_limit = limits;
    h.bucket = counts;
    Dltb__Value v = DLTB__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = DLTB__VALUE__VALUE_HISTO;
    v.histo = &h;
    int rc = write_value(w, &v, step, wall_time);
    free(counts);
    return rc;
}

int dl_tfevent_add_text(dl_tfevent_writer *w, const char *tag, const char *text, size_t len,
                        int64_t step, double wall_time) {
    Dltb__TensorShapeDim dim = DLTB__TENSOR_SHAPE_DIM__INIT;
    dim.size = 1;
    Dltb__TensorShapeDim *dims[1] = {&dim};
    Dltb__TensorShape shape = DLTB__TENSOR_SHAPE__INIT;
    shape.n_dim = 1;
    shape.dim = dims;
    ProtobufCBinaryData str = {len, (uint8_t *)text};
    Dltb__Tensor t = DLTB__TENSOR__INIT;
    t.dtype = DLTB__DATA_TYPE__DT_STRING;
    t.tensor_shape = &shape;
    t.n_string_val = 1;
    t.string_val = &str;
    Dltb__PluginData pd = DLTB__PLUGIN_DATA__INIT;
    pd.plugin_name = "text";
    Dltb__SummaryMetadata md = DLTB__SUMMARY_METADATA__INIT;
    md.plugin_data = &pd;
    Dltb__Value v = DLTB__VALUE__INIT;
    v.tag = (char *)tag;
    v.metadata = &md;
    v.value_case = DLTB__VALUE__VALUE_TENSOR;
    v.tensor = &t;
    return write_value(w, &v, step, wall_time);
}

/* --- hparams --------------------------------------------------------------------------- */

static void hp_value(Dltb__PbValue *o, const dl_tfhp_value *v) {
    dltb__pb_value__init(o);
    switch (v->type) {
    case DL_TFHP_STRING:
        o->kind_case = DLTB__PB_VALUE__KIND_STRING_VALUE;
        o->string_value = (char *)v->string;
        break;
    case DL_TFHP_BOOL:
        o->kind_case = DLTB__PB_VALUE__KIND_BOOL_VALUE;
        o->bool_value = v->boolean != 0;
        break;
    default:
        o->kind_case = DLTB__PB_VALUE__KIND_NUMBER_VALUE;
        o->number_value = v->number;
        break;
    }
}

/* A value whose metadata carries the packed plugin data pd under tag. */
static int write_hparams_value(dl_tfevent_writer *w, const char *tag,
                               const Dltb__HParamsPluginData *pd, int64_t step, double wall_time) {
    size_t m = dltb__hparams_plugin_data__get_packed_size(pd);
    uint8_t *content = malloc(m ? m : 1);
    if (!content) return dl_error("add_hparams: out of memory");
    dltb__hparams_plugin_data__pack(pd, content);
    Dltb__PluginData plugin = DLTB__PLUGIN_DATA__INIT;
    plugin.plugin_name = "hparams";
    plugin.content.data = content;
    plugin.content.len = m;
    Dltb__SummaryMetadata md = DLTB__SUMMARY_METADATA__INIT;
    md.plugin_data = &plugin;
    Dltb__Value v = DLTB__VALUE__INIT;
    v.tag = (char *)tag;
    v.metadata = &md;
    int rc = write_value(w, &v, step, wall_time);
    free(content);
    return rc;
}

int dl_tfevent_add_hparams(dl_tfevent_writer *w, const dl_tfhparam *hp, size_t n,
                           const char *const *metrics, size_t n_metrics, int64_t step,
                           double wall_time) {
    static const Dltb__HpDataType types[] = {DLTB__HP_DATA_TYPE__DATA_TYPE_FLOAT64,
                                             DLTB__HP_DATA_TYPE__DATA_TYPE_STRING,
                                             DLTB__HP_DATA_TYPE__DATA_TYPE_BOOL};
    size_t n_domain = 0;
    for (size_t i = 0; i < n; i++) n_domain += hp[i].n_domain;
    /* one allocation for every message the three events point into */
    size_t bytes = n * (sizeof(Dltb__HpHParamInfo) + sizeof(Dltb__HpHParamInfo *) +
                        sizeof(Dltb__PbListValue) + sizeof(Dltb__HpHParamsEntry) +
                        sizeof(Dltb__HpHParamsEntry *) + sizeof(Dltb__PbValue)) +
                   n_domain * (sizeof(Dltb__PbValue) + sizeof(Dltb__PbValue *)) +
                   n_metrics * (sizeof(Dltb__HpMetricInfo) + sizeof(Dltb__HpMetricInfo *) +
                                sizeof(Dltb__HpMetricName));
    void *block = malloc(bytes ? bytes : 1);
    if (!block) return dl_error("add_hparams: out of memory");
    Dltb__HpHParamInfo *infos = block;
    Dltb__PbListValue *lists = (void *)(infos + n);
    Dltb__HpHParamsEntry *entries = (void *)(lists + n);
    Dltb__PbValue *values = (void *)(entries + n);
    Dltb__PbValue *dvalues = values + n;
    Dltb__HpMetricInfo *minfos = (void *)(dvalues + n_domain);
    Dltb__HpMetricName *mnames = (void *)(minfos + n_metrics);
    Dltb__HpHParamInfo **pinfos = (void *)(mnames + n_metrics);
    Dltb__HpHParamsEntry **pentries = (void *)(pinfos + n);
    Dltb__PbValue **pdvalues = (void *)(pentries + n);
    Dltb__HpMetricInfo **pminfos = (void *)(pdvalues + n_domain);

    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        dltb__hp_hparam_info__init(&infos[i]);
        infos[i].name = (char *)hp[i].name;
        infos[i].type = types[hp[i].value.type];
        if (hp[i].n_domain) {
            dltb__pb_list_value__init(&lists[i]);
            lists[i].n_values = hp[i].n_domain;
            lists[i].values = pdvalues + d;
            for (size_t k = 0; k < hp[i].n_domain; k++, d++) {
                hp_value(&dvalues[d], &hp[i].domain[k]);
                pdvalues[d] = &dvalues[d];
            }
            infos[i].domain_discrete = &lists[i];
        }
        pinfos[i] = &infos[i];
        hp_value(&values[i], &hp[i].value);
        dltb__hp_hparams_entry__init(&entries[i]);
        entries[i].key = (char *)hp[i].name;
        entries[i].value = &values[i];
        pentries[i] = &entries[i];
    }
    for (size_t i = 0; i < n_metrics; i++) {
        dltb__hp_metric_name__init(&mnames[i]);
        mnames[i].tag = (char *)metrics[i];
        dltb__hp_metric_info__init(&minfos[i]);
        minfos[i].name = &mnames[i];
        pminfos[i] = &minfos[i];
    }
    double t = wall_time < 0 ? now() : wall_time;

    Dltb__HpExperiment exp = DLTB__HP_EXPERIMENT__INIT;
    exp.n_hparam_infos = n;
    exp.hparam_infos = pinfos;
    exp.n_metric_infos = n_metrics;
    exp.metric_infos = pminfos;
    Dltb__HParamsPluginData pd = DLTB__HPARAMS_PLUGIN_DATA__INIT;
    pd.data_case = DLTB__HPARAMS_PLUGIN_DATA__DATA_EXPERIMENT;
    pd.experiment = &exp;
    int rc = write_hparams_value(w, "_hparams_/experiment", &pd, step, t);

    Dltb__HpSessionStartInfo start = DLTB__HP_SESSION_START_INFO__INIT;
    start.n_hparams = n;
    start.hparams = pentries;
    start.start_time_secs = t;
    pd.data_case = DLTB__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO;
    pd.session_start_info = &start;
    if (!rc) rc = write_hparams_value(w, "_hparams_/session_start_info", &pd, step, t);

    Dltb__HpSessionEndInfo end = DLTB__HP_SESSION_END_INFO__INIT;
    end.status = DLTB__HP_STATUS__STATUS_SUCCESS;
    end.end_time_secs = t;
    pd.data_case = DLTB__HPARAMS_PLUGIN_DATA__DATA_SESSION_END_INFO;
    pd.session_end_info = &end;
    if (!rc) rc = write_hparams_value(w, "_hparams_/session_end_info", &pd, step, t);
    free(block);
    return rc;
}

/* --- the reader ------------------------------------------------------------------------ */

static void fill_value(dl_tfevent_value *o, const Dltb__Value *v) {
    o->tag = v->tag;
    switch (v->value_case) {
    case DLTB__VALUE__VALUE_SIMPLE_VALUE:
        o->kind = DL_TFV_SCALAR;
        o->scalar = v->simple_value;
        break;
    case DLTB__VALUE__VALUE_IMAGE:
        o->kind = DL_TFV_IMAGE;
        o->height = v->image->height;
        o->width = v->image->width;
        o->channels = v->image->colorspace;
        o->png = v->image->encoded_image_string.data;
        o->png_len = v->image->encoded_image_string.len;
        break;
    case DLTB__VALUE__VALUE_HISTO:
        o->kind = DL_TFV_HISTOGRAM;
        o->min = v->histo->min;
        o->max = v->histo->max;
        o->num = v->histo->num;
        o->sum = v->histo->sum;
        o->sum_squares = v->histo->sum_squares;
        o->bucket_limit = v->histo->bucket_limit;
        o->bucket = v->histo->bucket;
        o->n_buckets = v->histo->n_bucket < v->histo->n_bucket_limit ? v->histo->n_bucket
                                                                     : v->histo->n_bucket_limit;
        break;
    case DLTB__VALUE__VALUE_TENSOR:
        if (v->tensor->dtype == DLTB__DATA_TYPE__DT_STRING && v->tensor->n_string_val >= 1) {
            o->kind = DL_TFV_TEXT;
            o->text = (const char *)v->tensor->string_val[0].data;
            o->text_len = v->tensor->string_val[0].len;
        } else {
            o->kind = DL_TFV_OTHER;
        }
        break;
    default: o->kind = DL_TFV_OTHER; break;
    }
}

int dl_tfevent_read(const char *path, dl_tfevent_cb cb, void *ud, int *truncated) {
    uint8_t *buf;
    size_t n, off = 0, len;
    const uint8_t *data;
    if (dl_file_read(path, &buf, &n)) return -1;
    int records = 0, r;
    while ((r = dl_tfrecord_next(buf, n, &off, &data, &len, path)) == 1) {
        Dltb__Event *ev = dltb__event__unpack(NULL, len, data);
        if (!ev) {
            r = dl_error("tfevent: %s: record %d is not an Event", path, records + 1);
            break;
        }
        records++;
        dl_tfevent_value base = {.wall_time = ev->wall_time, .step = ev->step};
        if (ev->what_case == DLTB__EVENT__WHAT_FILE_VERSION) base.file_version = ev->file_version;
        size_t nv = ev->what_case == DLTB__EVENT__WHAT_SUMMARY ? ev->summary->n_value : 0;
        r = nv == 0 ? cb(ud, &base) : 0;
        for (size_t i = 0; i < nv && r == 0; i++) {
            dl_tfevent_value o = base;
            fill_value(&o, ev->summary->value[i]);
            r = cb(ud, &o);
        }
        dltb__event__free_unpacked(ev, NULL);
        if (r != 0) {
            r = dl_error("tfevent: %s: reading record %d failed", path, records);
            break;
        }
        r = 1;
    }
    if (truncated) *truncated = r == 0 && off < n;
    free(buf);
    return r < 0 ? -1 : records;
}

#else /* built without protobuf-c */

struct dl_tfevent_writer {
    int unused;
};

#define NO_PB dl_error("SummaryWriter: dlua was built without protobuf-c (TensorBoard support)")

int dl_tfevent_available(void) {
    return 0;
}
dl_tfevent_writer *dl_tfevent_open(const char *dir, const char *suffix, double flush_secs,
                                   int max_queue) {
    (void)dir, (void)suffix, (void)flush_secs, (void)max_queue;
    NO_PB;
    return NULL;
}
const char *dl_tfevent_path(const dl_tfevent_writer *w) {
    return (void)w, "";
}
int dl_tfevent_flush(dl_tfevent_writer *w) {
    return (void)w, NO_PB;
}
int dl_tfevent_close(dl_tfevent_writer *w) {
    return (void)w, 0;
}
int dl_tfevent_add_scalar(dl_tfevent_writer *w, const char *tag, float value, int64_t step,
                          double wall_time) {
    (void)w, (void)tag, (void)value, (void)step, (void)wall_time;
    return NO_PB;
}
int dl_tfevent_add_image(dl_tfevent_writer *w, const char *tag, int height, int width, int channels,
                         const uint8_t *png, size_t png_len, int64_t step, double wall_time) {
    (void)w, (void)tag, (void)height, (void)width, (void)channels, (void)png, (void)png_len;
    (void)step, (void)wall_time;
    return NO_PB;
}
int dl_tfevent_add_histogram(dl_tfevent_writer *w, const char *tag, const double *x, size_t n,
                             int64_t step, double wall_time) {
    (void)w, (void)tag, (void)x, (void)n, (void)step, (void)wall_time;
    return NO_PB;
}
int dl_tfevent_add_text(dl_tfevent_writer *w, const char *tag, const char *text, size_t len,
                        int64_t step, double wall_time) {
    (void)w, (void)tag, (void)text, (void)len, (void)step, (void)wall_time;
    return NO_PB;
}
int dl_tfevent_add_hparams(dl_tfevent_writer *w, const dl_tfhparam *hp, size_t n,
                           const char *const *metrics, size_t n_metrics, int64_t step,
                           double wall_time) {
    (void)w, (void)hp, (void)n, (void)metrics, (void)n_metrics, (void)step, (void)wall_time;
    return NO_PB;
}
int dl_tfevent_read(const char *path, dl_tfevent_cb cb, void *ud, int *truncated) {
    (void)path, (void)cb, (void)ud, (void)truncated;
    return NO_PB;
}

#endif
