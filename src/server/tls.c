/* SPDX-License-Identifier: Apache-2.0 */
/* TLS: the certificate chain and key are read once, at start, and checked here
 * with GnuTLS, the library libmicrohttpd serves TLS with, so a bad or
 * mismatched file is a located config error instead of a daemon that
 * does not start. libmicrohttpd gets the PEM text (MHD_OPTION_HTTPS_MEM_*). */
#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "srv.h"

#define TLS_FILE_MAX (1 << 20)

static char *read_pem(const char *path, char *msg, size_t msg_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    char *buf = NULL;
    size_t n = 0;

    if (fd < 0) {
        (void)snprintf(msg, msg_size, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > TLS_FILE_MAX || st.st_size == 0) {
        (void)snprintf(msg, msg_size, "%s: not a non-empty regular file of at most 1 MiB", path);
        goto fail;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        (void)snprintf(msg, msg_size, "out of memory");
        goto fail;
    }
    while (n < (size_t)st.st_size) {
        ssize_t k = read(fd, buf + n, (size_t)st.st_size - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            (void)snprintf(msg, msg_size, "%s: read: %s", path, k < 0 ? strerror(errno) : "short read");
            goto fail;
        }
        n += (size_t)k;
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        (void)snprintf(msg, msg_size, "%s: a NUL byte; PEM text is expected", path);
        goto fail;
    }
    (void)close(fd);
    return buf;
fail:
    free(buf);
    (void)close(fd);
    return NULL;
}

int srv_tls_load(struct srv_config *cfg, const char **which, char *msg, size_t msg_size)
{
    gnutls_certificate_credentials_t cred = NULL;
    gnutls_x509_crt_t *certs = NULL;
    unsigned n_certs = 0;
    gnutls_x509_privkey_t key = NULL;
    gnutls_datum_t d;
    int e, r = -1;

    *which = "cert";
    cfg->tls_cert_pem = read_pem(cfg->tls_cert_path, msg, msg_size);
    if (!cfg->tls_cert_pem)
        return -1;
    d = (gnutls_datum_t){.data = (unsigned char *)cfg->tls_cert_pem, .size = (unsigned)strlen(cfg->tls_cert_pem)};
    e = gnutls_x509_crt_list_import2(&certs, &n_certs, &d, GNUTLS_X509_FMT_PEM, 0);
    if (e < 0 || n_certs == 0) {
        (void)snprintf(msg, msg_size, "%s: not a PEM certificate (chain): %s", cfg->tls_cert_path,
                       e < 0 ? gnutls_strerror(e) : "no certificate");
        goto out;
    }
    *which = "key";
    cfg->tls_key_pem = read_pem(cfg->tls_key_path, msg, msg_size);
    if (!cfg->tls_key_pem)
        goto out;
    d = (gnutls_datum_t){.data = (unsigned char *)cfg->tls_key_pem, .size = (unsigned)strlen(cfg->tls_key_pem)};
    if ((e = gnutls_x509_privkey_init(&key)) < 0 || (e = gnutls_x509_privkey_import(key, &d, GNUTLS_X509_FMT_PEM)) < 0) {
        (void)snprintf(msg, msg_size, "%s: not an unencrypted PEM private key: %s", cfg->tls_key_path,
                       gnutls_strerror(e));
        goto out;
    }
    /* The pair, as the server will use it: a key of another certificate
     * is refused here. */
    gnutls_datum_t c = {.data = (unsigned char *)cfg->tls_cert_pem, .size = (unsigned)strlen(cfg->tls_cert_pem)};
    if ((e = gnutls_certificate_allocate_credentials(&cred)) < 0 ||
        (e = gnutls_certificate_set_x509_key_mem(cred, &c, &d, GNUTLS_X509_FMT_PEM)) < 0) {
        (void)snprintf(msg, msg_size, "%s: %s (the key of the certificate in %s?)", cfg->tls_key_path,
                       gnutls_strerror(e), cfg->tls_cert_path);
        goto out;
    }
    r = 0;
out:
    if (cred)
        gnutls_certificate_free_credentials(cred);
    if (key)
        gnutls_x509_privkey_deinit(key);
    for (unsigned i = 0; i < n_certs; i++)
        gnutls_x509_crt_deinit(certs[i]);
    gnutls_free(certs);
    if (r < 0) {
        free(cfg->tls_cert_pem);
        free(cfg->tls_key_pem);
        cfg->tls_cert_pem = cfg->tls_key_pem = NULL;
    }
    return r;
}
