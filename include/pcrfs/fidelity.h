/* pcrfs — image fidelity measures: MS-SSIM (src/lib/jpeg/msssim.c).
 *
 * PCR chooses a store's level by how close level K looks to the full image: MS-SSIM
 * of K against full, on luma (pcr_jpeg_decode_luma() in pcrfs/jpeg.h). The
 * definition is the standard one (Wang, Simoncelli, Bovik, "Multi-scale structural
 * similarity for image quality assessment", 2003; the reference msssim.m):
 *   - 8-bit images, dynamic range L = 255, C1 = (0.01 L)^2, C2 = (0.03 L)^2;
 *   - an 11x11 Gaussian window, sigma 1.5, normalised to sum 1, applied "valid"
 *     (no padding: a map of (w-10) x (h-10) values);
 *   - 5 scales; between scales a 2x2 average and decimation by 2, the odd last row
 *     or column averaged with itself (msssim.m's symmetric padding), so a side n
 *     becomes ceil(n/2);
 *   - MS-SSIM = prod_{j<M} mcs_j^w_j * ssim_M^w_M, where mcs_j is the mean of the
 *     contrast-structure map at scale j and ssim_M the mean SSIM map at the last
 *     scale, with w = 0.0448, 0.2856, 0.3001, 0.2363, 0.1333. A negative mean is
 *     taken as 0 (as pytorch-msssim does), so the result is in [0, 1].
 * Images too small for 5 scales. Scale j needs both sides >= 11 px. An image whose
 * smaller side is under 176 px (11 * 2^4) uses the M < 5 scales that fit, with the
 * first M weights rescaled to sum to 1 (so the value stays comparable with 5-scale
 * ones and identical images still give exactly 1). An image with a side under
 * 11 px gets a single global SSIM: means, variances and covariance over the whole
 * image (equal weights), reported as 0 scales.
 * Identical inputs give exactly 1.0 (the computation is symmetric and exact there).
 *
 * All functions are thread-safe; a reference may be compared from several threads.
 */
#ifndef PCRFS_FIDELITY_H
#define PCRFS_FIDELITY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PCR_MSSSIM_SCALES 5
#define PCR_MSSSIM_WINDOW 11 /* smallest side a scale needs */

/* A reference image prepared once (its pyramid), to compare many images with. */
struct pcr_msssim_ref;

/* Prepare @img (@width x @height 8-bit samples, rows @stride bytes apart).
 * @return 0; -EINVAL (a zero side, stride < width); -ENOMEM. */
int pcr_msssim_ref_new(const uint8_t *img, unsigned width, unsigned height, size_t stride,
                       struct pcr_msssim_ref **out);
void pcr_msssim_ref_free(struct pcr_msssim_ref *ref);

/* Scales the reference's size allows (0..5; 0 = the global SSIM of tiny images). */
unsigned pcr_msssim_ref_scales(const struct pcr_msssim_ref *ref);

/* MS-SSIM of @img against @ref, into *out (in [0, 1]).
 * @return 0; -EINVAL (sizes differ, stride < width); -ENOMEM. */
int pcr_msssim_compare(const struct pcr_msssim_ref *ref, const uint8_t *img, unsigned width,
                       unsigned height, size_t stride, double *out);

/* One-shot MS-SSIM of @a against @b (same size, rows @stride bytes apart); the
 * number of scales used goes to *scales if non-NULL.
 * @return 0; -EINVAL; -ENOMEM. */
int pcr_msssim(const uint8_t *a, const uint8_t *b, unsigned width, unsigned height, size_t stride,
               double *out, unsigned *scales);

#ifdef __cplusplus
}
#endif
#endif
